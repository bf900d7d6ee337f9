package sqlxrepo_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/sqlxrepo"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// books is what the handler changes: the invoices as rows without their id, which differs
// between two runs of one delivery.
type books struct{ Invoices []sqlxrepo.Invoice }

// The *sql.DB under sqlx and the store is opened through the kit, so that the kit sees the
// statements of the *sqlx.Tx, which sqlx begins on it.

func TestHandlerPostgres(t *testing.T) {
	runKit(t, openThroughTheKit(t, "pgx", layertest.PostgresURL(t)), sqlinbox.Postgres{}, layertest.InvoicesDDL)
}

func TestHandlerMariaDB(t *testing.T) {
	runKit(t, openThroughTheKit(t, "mysql", layertest.MySQLDSN(t)), sqlinbox.MySQL{}, layertest.InvoicesDDLMySQL)
}

func openThroughTheKit(t *testing.T, driver, dsn string) *sqlx.DB {
	t.Helper()
	db, err := handlertest.OpenDB(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqlx.NewDb(db, driver)
}

// runKit runs Handle through the kit (copies one after another and at once, a failure at
// each of its statements, at COMMIT and after it returned), and the write-behind path
// (Queue) the same way.
func runKit(t *testing.T, db *sqlx.DB, dialect sqlinbox.Dialect, ddl string) {
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	store, err := sqlxrepo.NewStore(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	h := &sqlxrepo.Handler{DB: db}
	c := handlertest.Case{
		Handler: layertest.KitHandler(h.Handle),
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: layertest.OrderMessage(t),
		Snapshot: func(ctx context.Context) (any, error) {
			var b books
			err := db.SelectContext(ctx, &b.Invoices, "SELECT order_id, amount_cents FROM invoices ORDER BY order_id, amount_cents")
			return b, err
		},
		Reset: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DELETE FROM invoices")
			return err
		},
	}
	t.Run("claim-first", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
	c.Config.WriteBehind = true
	c.Handler = layertest.QueueHandler(h.Queue)
	t.Run("write-behind", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
}

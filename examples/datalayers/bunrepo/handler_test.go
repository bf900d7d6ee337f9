package bunrepo_test

import (
	"context"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/bunrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is a row of the invoices table, as the kit compares it: no ID, which differs
// between two runs of one delivery.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// books is what the handler changes.
type books struct{ Invoices []invoice }

// The *sql.DB under bun and the store is opened through the kit, so that the kit sees the
// statements of the bun.Tx, which bun begins on it.

func TestHandlerPostgres(t *testing.T) {
	runKit(t, openThroughTheKit(t, "pgx", layertest.PostgresURL(t), pgdialect.New()), sqlinbox.Postgres{})
}

func TestHandlerMariaDB(t *testing.T) {
	runKit(t, openThroughTheKit(t, "mysql", layertest.MySQLDSN(t), mysqldialect.New()), sqlinbox.MySQL{})
}

func openThroughTheKit(t *testing.T, driver, dsn string, dialect schema.Dialect) *bun.DB {
	t.Helper()
	db, err := handlertest.OpenDB(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return bun.NewDB(db, dialect)
}

// runKit runs Handle through the kit (copies one after another and at once, a failure at
// each of its statements, at COMMIT and after it returned), and the write-behind path
// (Queue) the same way.
func runKit(t *testing.T, db *bun.DB, dialect sqlinbox.Dialect) {
	ctx := context.Background()
	if _, err := db.NewCreateTable().Model((*bunrepo.Invoice)(nil)).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := bunrepo.NewStore(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	h := &bunrepo.Handler{DB: db}
	c := handlertest.Case{
		Handler: layertest.KitHandler(h.Handle),
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: layertest.OrderMessage(t),
		Snapshot: func(ctx context.Context) (any, error) {
			var b books
			err := db.NewSelect().Model((*bunrepo.Invoice)(nil)).Column("order_id", "amount_cents").
				Order("order_id", "amount_cents").Scan(ctx, &b.Invoices)
			return b, err
		},
		Reset: func(ctx context.Context) error {
			_, err := db.NewDelete().Model((*bunrepo.Invoice)(nil)).Where("1 = 1").Exec(ctx)
			return err
		},
	}
	t.Run("claim-first", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
	c.Config.WriteBehind = true
	c.Handler = layertest.QueueHandler(h.Queue)
	t.Run("write-behind", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
}

package sqlxrepo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/sqlxrepo"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestSQLXPostgres(t *testing.T) {
	db := sqlx.NewDb(layertest.Open(t, "pgx", layertest.PostgresURL(t)), "pgx")
	run(t, db, sqlinbox.Postgres{}, layertest.InvoicesDDL, true)
}

func TestSQLXMariaDB(t *testing.T) {
	db := sqlx.NewDb(layertest.Open(t, "mysql", layertest.MySQLDSN(t)), "mysql")
	run(t, db, sqlinbox.MySQL{}, layertest.InvoicesDDLMySQL, false)
}

func run(t *testing.T, db *sqlx.DB, dialect sqlinbox.Dialect, ddl string, pg bool) {
	ctx := context.Background()
	if _, err := db.Exec(ddl); err != nil {
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
	inTx := func(ctx context.Context) *sqlx.Tx {
		tx, _ := inbox.TxFromContext[*sqlx.Tx](ctx)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       db.DB,
		Postgres: pg,
		Record:   h.Record,
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			return sqlxrepo.Record(ctx, db, o) // the trap: the *sqlx.DB is the pool
		},
		// sqlx has no nested transactions: a savepoint by hand.
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			tx := inTx(ctx)
			if _, err := tx.ExecContext(ctx, "SAVEPOINT nested"); err != nil {
				return err
			}
			err := sqlxrepo.Record(ctx, tx, o)
			if err == nil {
				err = then()
			}
			if err != nil {
				_, undoErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT nested")
				return errors.Join(err, undoErr)
			}
			_, err = tx.ExecContext(ctx, "RELEASE SAVEPOINT nested")
			return err
		},
		EndTx: func(ctx context.Context, commit bool) error {
			if commit {
				return inTx(ctx).Commit()
			}
			return inTx(ctx).Rollback()
		},
		Queue: h.Queue,
	})
}

// What sqlx's own *sqlx.Tx brings and a bare one lacks: named queries bound for the driver
// (a literal &sqlx.Tx{Tx: tx} binds ? on PostgreSQL) and the mapper for Select.
func TestSQLXNamedQueriesAndSelectOnTheInboxTransaction(t *testing.T) {
	db := sqlx.NewDb(layertest.Open(t, "pgx", layertest.PostgresURL(t)), "pgx")
	if _, err := db.Exec(layertest.InvoicesDDL); err != nil {
		t.Fatal(err)
	}
	store, err := sqlxrepo.NewStore(db, sqlinbox.Postgres{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := &sqlxrepo.Handler{DB: db}
	var read []sqlxrepo.Invoice
	handler := layertest.Handler(t, store, func(ctx context.Context, order billing.OrderPlaced) error {
		if err := h.Record(ctx, order); err != nil {
			return err
		}
		tx, _ := inbox.TxFromContext[*sqlx.Tx](ctx)
		return tx.SelectContext(ctx, &read, tx.Rebind("SELECT order_id, amount_cents FROM invoices WHERE order_id = ?"), order.OrderID)
	})
	if err := layertest.Deliver(handler, "order-1"); err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read[0].OrderID != "order-1" {
		t.Errorf("read back %+v through the inbox transaction, want order-1's invoice", read)
	}
}

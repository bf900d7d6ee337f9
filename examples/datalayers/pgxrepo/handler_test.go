package pgxrepo_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/pgxrepo"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is a row of the invoices table, as the kit compares it: no id, which differs
// between two runs of one delivery.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// books is what the handler changes.
type books struct{ Invoices []invoice }

// TestHandler runs Handle through the kit (copies one after another and at once, a failure
// at each of its statements, at COMMIT and after it returned), and the write-behind path
// (RecordInvoiceSQL queued with inbox.ExecAtCommit) the same way.
func TestHandler(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, layertest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, layertest.InvoicesDDL); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	c := handlertest.Case{
		Handler: layertest.KitHandler(pgxrepo.Handle),
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: layertest.OrderMessage(t),
		Snapshot: func(ctx context.Context) (any, error) {
			rows, err := pool.Query(ctx, "SELECT order_id, amount_cents FROM invoices ORDER BY order_id, amount_cents")
			if err != nil {
				return nil, err
			}
			invoices, err := pgx.CollectRows(rows, pgx.RowToStructByPos[invoice])
			return books{Invoices: invoices}, err
		},
		Reset: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DELETE FROM invoices")
			return err
		},
	}
	t.Run("claim-first", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
	c.Config.WriteBehind = true
	c.Handler = layertest.QueueHandler(func(ctx context.Context, o billing.OrderPlaced) error {
		return inbox.ExecAtCommit(ctx, pgxrepo.RecordInvoiceSQL, o.OrderID, o.AmountCents)
	})
	t.Run("write-behind", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
}

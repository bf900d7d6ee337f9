package main

// This file is the same in every broker program (TestBrokerProgramsShareTheirCopies), as
// handleOrder is, so that each program has the test of its handler beside it.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is a row of the invoice table, as the kit compares it.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// books is what handleOrder changes.
type books struct{ Invoices []invoice }

// TestHandleOrder runs handleOrder through the kit on PostgreSQL: copies one after another
// and at once, a failure at each of its statements, at COMMIT and after it returned. The
// broker plays no part: the kit delivers the copies itself.
func TestHandleOrder(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	inboxTable, invoiceTable := testenv.Name("inbox"), testenv.Name("invoices")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+inboxTable+", "+invoiceTable); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := createInvoices(ctx, pool, invoiceTable); err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(OrderPlaced{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	handle := handleOrder(invoiceTable)
	handlertest.Run(t.Context(), t, handlertest.Case{
		Handler: func(msg *message.Message) ([]*message.Message, error) { return nil, handle(msg) },
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: message.NewMessage("order-1", payload),
		Snapshot: func(ctx context.Context) (any, error) {
			rows, err := pool.Query(ctx, "SELECT order_id, amount_cents FROM "+invoiceTable+" ORDER BY order_id, amount_cents")
			if err != nil {
				return nil, err
			}
			invoices, err := pgx.CollectRows(rows, pgx.RowToStructByPos[invoice])
			return books{Invoices: invoices}, err
		},
		Reset: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DELETE FROM "+invoiceTable)
			return err
		},
	}, nil)
}

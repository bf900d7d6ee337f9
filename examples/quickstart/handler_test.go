package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is a row of the invoices table, as the kit compares it.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// books is what handleOrder changes.
type books struct{ Invoices []invoice }

// TestHandleOrder runs handleOrder through the kit (copies, concurrent copies, a failure at
// each of its statements, at COMMIT and after it returned) on a SQLite file, opened through
// the kit so that it sees the statements on the inbox transaction.
//
// The busy timeout is short, unlike the program's: a copy that waits longer for another's
// write lock is nacked with SQLITE_BUSY and redelivered (the store reports it transient), and a
// handler that wrote through the pool while it holds the inbox transaction would fail at
// once, with a report that names its statement, instead of waiting for itself until the
// kit's deadline.
func TestHandleOrder(t *testing.T) {
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "quickstart.db") + "?_pragma=busy_timeout(250)&_pragma=journal_mode(WAL)"
	db, err := handlertest.OpenDB("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := sqlinbox.NewDB(db, sqlinbox.SQLite{}, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := createInvoices(ctx, db); err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(OrderPlaced{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	handlertest.Run(t.Context(), t, handlertest.Case{
		Handler: func(msg *message.Message) ([]*message.Message, error) { return nil, handleOrder(msg) },
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: message.NewMessage("order-1", payload),
		Snapshot: func(ctx context.Context) (any, error) {
			invoices, err := readInvoices(ctx, db)
			return books{Invoices: invoices}, err
		},
		Reset: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DELETE FROM invoices")
			return err
		},
	}, nil)
}

// readInvoices reads every invoice, ordered.
func readInvoices(ctx context.Context, db *sql.DB) ([]invoice, error) {
	rows, err := db.QueryContext(ctx, "SELECT order_id, amount_cents FROM invoices ORDER BY order_id, amount_cents")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var invoices []invoice
	for rows.Next() {
		var i invoice
		if err := rows.Scan(&i.OrderID, &i.AmountCents); err != nil {
			return nil, err
		}
		invoices = append(invoices, i)
	}
	return invoices, rows.Err()
}

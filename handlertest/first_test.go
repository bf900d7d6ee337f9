package handlertest_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is the handler under test: it writes the order's invoice through the inbox
// transaction.
func invoice(msg *message.Message) ([]*message.Message, error) {
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return nil, errors.New("invoice: no inbox transaction")
	}
	_, err := tx.Exec(ctx, "INSERT INTO invoices (order_id) VALUES ($1)", string(msg.Payload))
	return nil, err
}

func TestInvoice(t *testing.T) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		t.Skip("set DATABASE_URL to a PostgreSQL test database")
	}
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS invoices (order_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: "inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	handlertest.Run(ctx, t, handlertest.Case{
		Handler: invoice,
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: message.NewMessage("order-1", []byte("order-1")),
		Snapshot: func(ctx context.Context) (any, error) {
			rows, err := pool.Query(ctx, "SELECT order_id FROM invoices ORDER BY order_id")
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		},
		Reset: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DELETE FROM invoices")
			return err
		},
	}, nil)
}

package e2e

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// ErrNoTransaction is returned by Invoices.Handle when the message does not come through the
// inbox middleware: without the inbox transaction the handler refuses to write.
var ErrNoTransaction = errors.New("e2e: no inbox transaction in the message context")

// Invoices is the handler the scenario runs: it writes one invoice per OrderPlaced to a
// table of PostgreSQL, through the inbox transaction. Build it with NewInvoices.
//
// The table has no UNIQUE constraint on order_id, on purpose: the inbox is the only thing
// that stops a second invoice for one order, so the tests can count rows to prove it works.
type Invoices struct {
	table string // quoted
}

// NewInvoices returns the invoice writer for table, validated and quoted like the inbox's.
func NewInvoices(table string) (*Invoices, error) {
	parsed, err := (sqlinbox.Postgres{}).ParseTable(table)
	quoted := parsed.Quoted
	if err != nil {
		return nil, err
	}
	return &Invoices{table: quoted}, nil
}

// Handle decodes the order and inserts its invoice through the inbox transaction (a pgx.Tx),
// so the invoice and the inbox claim commit or roll back together.
func (i *Invoices) Handle(msg *message.Message) error {
	order, err := billing.DecodeOrder(msg)
	if err != nil {
		return err
	}
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return ErrNoTransaction
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+i.table+" (order_id, amount_cents) VALUES ($1, $2)", order.OrderID, order.AmountCents)
	if err != nil {
		return fmt.Errorf("e2e: insert invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// CreateTable creates the invoice table.
func (i *Invoices) CreateTable(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+i.table+` (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id     text NOT NULL,
	amount_cents bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
)`)
	return err
}

// Counts is what the invoice table holds.
type Counts struct {
	Invoices int // rows
	Orders   int // distinct order IDs
}

// Count counts the invoices.
func (i *Invoices) Count(ctx context.Context, pool *pgxpool.Pool) (Counts, error) {
	var c Counts
	err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT order_id) FROM "+i.table).Scan(&c.Invoices, &c.Orders)
	if err != nil {
		return Counts{}, fmt.Errorf("e2e: count invoices: %w", err)
	}
	return c, nil
}

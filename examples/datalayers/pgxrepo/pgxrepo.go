// Package pgxrepo is a billing handler whose repository is written by hand over pgx, typed
// on a small interface that both *pgxpool.Pool and pgx.Tx satisfy: the application builds it
// on its pool, the handler on the inbox transaction. No helper is needed.
package pgxrepo

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
)

// DB is what the repository needs; *pgxpool.Pool, *pgx.Conn and pgx.Tx all have it.
// Begin on a pgx.Tx is a savepoint.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Invoices is the repository.
type Invoices struct{ db DB }

// NewInvoices returns the repository on db.
func NewInvoices(db DB) *Invoices { return &Invoices{db: db} }

// RecordInvoiceSQL is the insert Record runs, and what a write-behind handler queues.
const RecordInvoiceSQL = "INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2)"

// Record writes order's invoice.
func (r *Invoices) Record(ctx context.Context, order billing.OrderPlaced) error {
	if _, err := r.db.Exec(ctx, RecordInvoiceSQL, order.OrderID, order.AmountCents); err != nil {
		return fmt.Errorf("pgxrepo: record invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// Handle is the inbox handler: it builds the repository on the inbox transaction, so the
// invoice commits or rolls back with the claim.
func Handle(msg *message.Message) error {
	order, err := billing.DecodeOrder(msg)
	if err != nil {
		return err
	}
	tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
	if !ok {
		return errors.New("pgxrepo: no pgx inbox transaction in the message context")
	}
	return NewInvoices(tx).Record(msg.Context(), order)
}

// Package sqlxrepo is a billing handler whose repository is written with sqlx, typed on
// sqlx.ExtContext so that both the application's *sqlx.DB and a *sqlx.Tx serve it. The
// inbox store begins its transactions with sqlx's own BeginTxx (NewStore), so the handler
// gets a *sqlx.Tx that sqlx built, from inbox.TxFromContext.
package sqlxrepo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jmoiron/sqlx"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// NewStore returns the inbox store on db's database whose transactions sqlx begins: handlers
// get them as a *sqlx.Tx, with db's mapper, driver name (for named queries and Rebind) and
// unsafe mode.
func NewStore(db *sqlx.DB, dialect sqlinbox.Dialect) (*sqlinbox.Store, error) {
	return sqlinbox.NewDB(db.DB, dialect, sqlinbox.Config{
		Begin: sqlinbox.BeginWith(db.BeginTxx, func(tx *sqlx.Tx) *sql.Tx { return tx.Tx }),
	})
}

// Invoice is a row of the table invoices.
type Invoice struct {
	OrderID     string `db:"order_id"`
	AmountCents int64  `db:"amount_cents"`
}

// recordSQL is a named query: sqlx binds it in the driver's placeholder style.
const recordSQL = "INSERT INTO invoices (order_id, amount_cents) VALUES (:order_id, :amount_cents)"

// Record is the repository method: it writes order's invoice with db.
func Record(ctx context.Context, db sqlx.ExtContext, order billing.OrderPlaced) error {
	if _, err := sqlx.NamedExecContext(ctx, db, recordSQL, Invoice{order.OrderID, order.AmountCents}); err != nil {
		return fmt.Errorf("sqlxrepo: record invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// Handler records an invoice per OrderPlaced message.
type Handler struct {
	// DB is the application's *sqlx.DB, on the *sql.DB of the inbox store.
	DB *sqlx.DB
}

// Handle is the inbox handler: the invoice commits or rolls back with the claim.
func (h *Handler) Handle(msg *message.Message) error {
	order, err := billing.DecodeOrder(msg)
	if err != nil {
		return err
	}
	return h.Record(msg.Context(), order)
}

// Record writes order's invoice on the inbox transaction in ctx.
func (h *Handler) Record(ctx context.Context, order billing.OrderPlaced) error {
	tx, ok := inbox.TxFromContext[*sqlx.Tx](ctx)
	if !ok {
		return errors.New("sqlxrepo: no inbox transaction as a *sqlx.Tx in the message context (is the store built by NewStore?)")
	}
	return Record(ctx, tx, order)
}

// Queue queues order's invoice with inbox.ExecAtCommit, for write-behind mode: sqlx binds the named
// query without a round trip, then rebinds it for the driver.
func (h *Handler) Queue(ctx context.Context, order billing.OrderPlaced) error {
	query, args, err := sqlx.Named(recordSQL, Invoice{order.OrderID, order.AmountCents})
	if err != nil {
		return fmt.Errorf("sqlxrepo: bind invoice for order %q: %w", order.OrderID, err)
	}
	return inbox.ExecAtCommit(ctx, h.DB.Rebind(query), args...)
}

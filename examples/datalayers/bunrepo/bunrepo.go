// Package bunrepo is a billing handler whose repository is bun, typed on bun.IDB so that
// both the application's *bun.DB and a bun.Tx serve it. The inbox store begins its
// transactions with bun's own BeginTx (NewStore), so the handler gets a bun.Tx that bun
// built, from inbox.TxFromContext.
package bunrepo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/uptrace/bun"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// NewStore returns the inbox store on db's database whose transactions bun begins: handlers
// get them as a bun.Tx bound to db, with its query hooks and RunInTx savepoints.
func NewStore(db *bun.DB, dialect sqlinbox.Dialect) (*sqlinbox.Store, error) {
	return sqlinbox.NewDB(db.DB, dialect, sqlinbox.Config{
		Begin: sqlinbox.BeginWith(db.BeginTx, func(tx bun.Tx) *sql.Tx { return tx.Tx }),
	})
}

// Invoice is a row of the table invoices.
type Invoice struct {
	bun.BaseModel `bun:"table:invoices"`
	ID            int64  `bun:",pk,autoincrement"`
	OrderID       string `bun:",notnull"`
	AmountCents   int64  `bun:",notnull"`
}

// Record is the repository method: it writes order's invoice with db.
func Record(ctx context.Context, db bun.IDB, order billing.OrderPlaced) error {
	if _, err := db.NewInsert().Model(&Invoice{OrderID: order.OrderID, AmountCents: order.AmountCents}).Exec(ctx); err != nil {
		return fmt.Errorf("bunrepo: record invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// Handler records an invoice per OrderPlaced message.
type Handler struct {
	// DB is the application's *bun.DB, on the *sql.DB of the inbox store.
	DB *bun.DB
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
	tx, ok := inbox.TxFromContext[bun.Tx](ctx)
	if !ok {
		return errors.New("bunrepo: no inbox transaction as a bun.Tx in the message context (is the store built by NewStore?)")
	}
	return Record(ctx, tx, order)
}

// Queue queues order's invoice with inbox.ExecAtCommit, for write-behind mode. bun formats the
// arguments into the text itself (it sends no placeholders to the driver either), so the
// queued statement is exactly what bun would have sent.
func (h *Handler) Queue(ctx context.Context, order billing.OrderPlaced) error {
	query := h.DB.NewInsert().Model(&Invoice{OrderID: order.OrderID, AmountCents: order.AmountCents})
	return inbox.ExecAtCommit(ctx, query.String())
}

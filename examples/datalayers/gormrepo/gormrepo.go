// Package gormrepo is a billing handler whose repository is GORM, on PostgreSQL or MariaDB.
// The application opens one *gorm.DB on the *sql.DB of its store (sqlinbox.NewDB);
// inboxgorm.DB turns it into a session on each message's inbox transaction.
package gormrepo

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm"
	"github.com/inboxkit/watermill-inbox/examples/billing"
)

// Invoice is a row of the table invoices (GORM's name for it). No unique index on
// OrderID, on purpose: the inbox is what stops a second invoice.
type Invoice struct {
	ID          int64  `gorm:"primaryKey"`
	OrderID     string `gorm:"not null"`
	AmountCents int64  `gorm:"not null"`
}

// Handler records an invoice per OrderPlaced message.
type Handler struct {
	// DB is the application's shared *gorm.DB.
	DB *gorm.DB
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
	db, ok := inboxgorm.DB(ctx, h.DB)
	if !ok {
		return errors.New("gormrepo: no database/sql inbox transaction in the message context")
	}
	return Create(db, order)
}

// Create is the repository method: it writes order's invoice with db.
func Create(db *gorm.DB, order billing.OrderPlaced) error {
	if err := db.Create(&Invoice{OrderID: order.OrderID, AmountCents: order.AmountCents}).Error; err != nil {
		return fmt.Errorf("gormrepo: record invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// Queue queues order's invoice with inbox.ExecAtCommit, for write-behind mode: GORM renders the
// INSERT in a dry run (no round trip), with its placeholders and arguments.
func (h *Handler) Queue(ctx context.Context, order billing.OrderPlaced) error {
	dry := h.DB.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true, Context: ctx})
	stmt := dry.Create(&Invoice{OrderID: order.OrderID, AmountCents: order.AmountCents}).Statement
	if stmt.Error != nil {
		return fmt.Errorf("gormrepo: render invoice for order %q: %w", order.OrderID, stmt.Error)
	}
	return inbox.ExecAtCommit(ctx, stmt.SQL.String(), stmt.Vars...)
}

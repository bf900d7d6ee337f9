// Package billing is the business side of every example: one handler that turns an
// OrderPlaced event into an invoice row. It is written once and used unchanged with every
// broker; the inbox middleware around it is what makes it safe to run twice.
package billing

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Topic is the topic the examples publish orders to and consume them from.
const Topic = "orders"

// OrderPlaced is the event the examples publish: the payload of every message, as JSON.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// NewOrderMessage returns a message carrying order. Its UUID is the order ID, so every copy
// of one order (a producer retry, a broker redelivery) has the same idempotency key.
func NewOrderMessage(order OrderPlaced) (*message.Message, error) {
	payload, err := json.Marshal(order)
	if err != nil {
		return nil, fmt.Errorf("billing: marshal order %q: %w", order.OrderID, err)
	}
	return message.NewMessage(order.OrderID, payload), nil
}

// DecodeOrder reads the OrderPlaced in msg's payload.
func DecodeOrder(msg *message.Message) (OrderPlaced, error) {
	var order OrderPlaced
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return OrderPlaced{}, fmt.Errorf("billing: decode message %q: %w", msg.UUID, err)
	}
	if order.OrderID == "" {
		return OrderPlaced{}, fmt.Errorf("billing: message %q has no order_id", msg.UUID)
	}
	return order, nil
}

// ErrNoTransaction is returned by Invoices.Handle when the message does not come through the
// inbox middleware: without the inbox transaction the handler refuses to write.
var ErrNoTransaction = errors.New("billing: no inbox transaction in the message context")

// Invoices writes invoices to one table. Build it with NewInvoices.
//
// The table has no UNIQUE constraint on order_id, on purpose: the inbox is the only thing
// that stops a second invoice for one order, so the tests can count rows to prove it works.
// A real schema would add the constraint as a second line of defence.
type Invoices struct {
	dialect string
	table   string // quoted
}

// The databases NewInvoices writes to.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

var dialects = map[string]sqlinbox.Dialect{Postgres: sqlinbox.Postgres(), SQLite: sqlinbox.SQLite()}

// NewInvoices returns the invoice writer for table in dialect (Postgres or SQLite). The
// table name is validated and quoted like the inbox's.
func NewInvoices(dialect, table string) (*Invoices, error) {
	d, ok := dialects[dialect]
	if !ok {
		return nil, fmt.Errorf("billing: dialect %q is not supported", dialect)
	}
	quoted, err := d.QuoteTable(table)
	if err != nil {
		return nil, err
	}
	return &Invoices{dialect: dialect, table: quoted}, nil
}

// Handle is the business handler: it decodes the order and inserts its invoice through the
// inbox transaction, so the invoice and the inbox claim commit or roll back together. It
// works with a pgx store (pgx.Tx) and with a database/sql store (*sql.Tx). Register it with
// Router.AddConsumerHandler behind the inbox middleware.
func (i *Invoices) Handle(msg *message.Message) error {
	order, err := DecodeOrder(msg)
	if err != nil {
		return err
	}
	ctx := msg.Context()
	if tx, ok := inbox.TxFromContext[pgx.Tx](ctx); ok {
		_, err = tx.Exec(ctx, i.insertSQL(), order.OrderID, order.AmountCents)
	} else if tx, ok := inbox.TxFromContext[*sql.Tx](ctx); ok {
		_, err = tx.ExecContext(ctx, i.insertSQL(), order.OrderID, order.AmountCents)
	} else {
		return ErrNoTransaction
	}
	if err != nil {
		return fmt.Errorf("billing: insert invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

func (i *Invoices) insertSQL() string {
	if i.dialect == SQLite {
		return "INSERT INTO " + i.table + " (order_id, amount_cents) VALUES (?, ?)"
	}
	return "INSERT INTO " + i.table + " (order_id, amount_cents) VALUES ($1, $2)"
}

// CreateTableSQL returns the DDL of the invoice table.
func (i *Invoices) CreateTableSQL() string {
	if i.dialect == SQLite {
		return `CREATE TABLE IF NOT EXISTS ` + i.table + ` (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	order_id     TEXT NOT NULL,
	amount_cents INTEGER NOT NULL,
	created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`
	}
	return `CREATE TABLE IF NOT EXISTS ` + i.table + ` (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	order_id     text NOT NULL,
	amount_cents bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
)`
}

// DropTableSQL returns the statement that drops the invoice table.
func (i *Invoices) DropTableSQL() string { return "DROP TABLE IF EXISTS " + i.table }

// Counts is what the invoice table holds.
type Counts struct {
	Invoices int // rows
	Orders   int // distinct order IDs
}

func (i *Invoices) countSQL() string {
	return "SELECT count(*), count(DISTINCT order_id) FROM " + i.table
}

// CountPgx counts the invoices through a pgx connection or pool.
func (i *Invoices) CountPgx(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Counts, error) {
	var c Counts
	if err := db.QueryRow(ctx, i.countSQL()).Scan(&c.Invoices, &c.Orders); err != nil {
		return Counts{}, fmt.Errorf("billing: count invoices: %w", err)
	}
	return c, nil
}

// CountSQL counts the invoices through database/sql.
func (i *Invoices) CountSQL(ctx context.Context, db *sql.DB) (Counts, error) {
	var c Counts
	if err := db.QueryRowContext(ctx, i.countSQL()).Scan(&c.Invoices, &c.Orders); err != nil {
		return Counts{}, fmt.Errorf("billing: count invoices: %w", err)
	}
	return c, nil
}

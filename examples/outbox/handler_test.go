package main

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// invoice is a row of the invoice table, as the kit compares it.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// outboxEvent is a row of the outbox, without the UUIDs: the handler gives its event a new
// one on every run, and only one run commits.
type outboxEvent struct {
	DestinationTopic string
	OrderID          string // the event's order_id metadata
	Payload          string
}

// books is what Handler changes: the invoice and its event, which commit together.
type books struct {
	Invoices []invoice
	Outbox   []outboxEvent
}

// TestHandler runs the outbox example's handler through the kit on PostgreSQL: copies one
// after another and at once, a failure at each of its statements (the invoice's INSERT and
// the outbox's), at COMMIT and after it returned. Every time, the invoice and its event
// commit together or not at all. The handler publishes only to the outbox, through
// watermill-sql on the inbox transaction: the kit sees those rows in the snapshot, not as
// published messages (Options.Recorder is for inbox.NewPublisher).
func TestHandler(t *testing.T) {
	ctx := context.Background()
	pool := e2e.Pool(t)
	s := &System{Consumer: "billing", InboxTable: testenv.Name("inbox"), InvoiceTable: testenv.Name("invoices"),
		Outbox: Outbox{Topic: testenv.Name("outbox")}}
	t.Cleanup(func() {
		if err := s.DropTables(context.WithoutCancel(ctx), pool); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	store, err := s.createTables(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	forwarderSubscriber, err := s.Outbox.subscriber(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = forwarderSubscriber.Close() })
	if err := forwarderSubscriber.SubscribeInitialize(s.Outbox.Topic); err != nil { // creates the outbox table
		t.Fatal(err)
	}
	order, err := newOrderMessage(OrderPlaced{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	handle := Handler{InvoiceTable: s.InvoiceTable, Outbox: s.Outbox}.Handle
	handlertest.Run(t.Context(), t, handlertest.Case{
		Handler:  func(msg *message.Message) ([]*message.Message, error) { return nil, handle(msg) },
		Store:    store,
		Config:   inbox.Config{Consumer: s.Consumer},
		Message:  order,
		Snapshot: func(ctx context.Context) (any, error) { return readBooks(ctx, pool, s) },
		Reset: func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DELETE FROM "+s.InvoiceTable+"; DELETE FROM "+s.Outbox.Table())
			return err
		},
	}, nil)
}

// readBooks reads the invoices and the outbox, ordered.
func readBooks(ctx context.Context, pool *pgxpool.Pool, s *System) (books, error) {
	var b books
	rows, err := pool.Query(ctx, "SELECT order_id, amount_cents FROM "+s.InvoiceTable+" ORDER BY order_id, amount_cents")
	if err != nil {
		return b, err
	}
	if b.Invoices, err = pgx.CollectRows(rows, pgx.RowToStructByPos[invoice]); err != nil {
		return b, err
	}
	rows, err = pool.Query(ctx, `SELECT payload->>'destination_topic', payload->'metadata'->>'order_id',
		convert_from(decode(payload->>'payload', 'base64'), 'UTF8') FROM `+s.Outbox.Table()+` ORDER BY 1, 2, 3`)
	if err != nil {
		return b, err
	}
	b.Outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[outboxEvent])
	return b, err
}

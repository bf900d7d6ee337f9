package main

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// commandHandler is what a command processor makes of h, for the kit: it decodes the
// message into h's command and calls Handle with the message in the context, as the
// processor does (cqrs.OriginalMessageFromCtx finds it there).
func commandHandler(marshaler cqrs.CommandEventMarshaler, h cqrs.CommandHandler) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		cmd := h.NewCommand()
		if err := marshaler.Unmarshal(msg, cmd); err != nil {
			return nil, err
		}
		return nil, h.Handle(cqrs.CtxWithOriginalMessage(msg.Context(), msg), cmd)
	}
}

// eventHandler is commandHandler for an event handler.
func eventHandler(marshaler cqrs.CommandEventMarshaler, h cqrs.EventHandler) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		event := h.NewEvent()
		if err := marshaler.Unmarshal(msg, event); err != nil {
			return nil, err
		}
		return nil, h.Handle(cqrs.CtxWithOriginalMessage(msg.Context(), msg), event)
	}
}

// TestHandlers runs each of the four handlers through the kit on PostgreSQL, with the App's
// buses on an inbox.Publisher over the kit's Recorder instead of RabbitMQ: copies one after
// another and at once, a failure at each statement, at COMMIT and after the handler
// returned. What IssueInvoice and Receipts publish through the buses must be sent again,
// under the same UUIDs, by every copy, and never by a failed attempt.
func TestHandlers(t *testing.T) {
	for _, h := range []struct {
		name    string
		handler func(a *App) message.HandlerFunc
		message any
	}{
		{IssueInvoiceHandler, func(a *App) message.HandlerFunc {
			return commandHandler(Marshaler, cqrs.NewCommandHandler(IssueInvoiceHandler, a.issueInvoice))
		}, &IssueInvoice{OrderID: "order-1", AmountCents: 1250}},
		{ReceiptsHandler, func(a *App) message.HandlerFunc {
			return eventHandler(Marshaler, cqrs.NewEventHandler(ReceiptsHandler, a.receipt))
		}, &InvoiceIssued{OrderID: "order-1", AmountCents: 1250}},
		{SendReceiptHandler, func(a *App) message.HandlerFunc {
			return commandHandler(Marshaler, cqrs.NewCommandHandler(SendReceiptHandler, a.sendReceipt))
		}, &SendReceipt{OrderID: "order-1"}},
		{ShippingHandler, func(a *App) message.HandlerFunc {
			return eventHandler(Marshaler, cqrs.NewEventHandler(ShippingHandler, a.ship))
		}, &OrderShipped{OrderID: "order-1"}},
	} {
		t.Run(h.name, func(t *testing.T) {
			a, recorder := kitApp(t)
			msg, err := Marshaler.Marshal(h.message)
			if err != nil {
				t.Fatal(err)
			}
			msg.UUID = h.name + "-order-1" // the same key in every run
			handlertest.Run(t.Context(), t, handlertest.Case{
				Handler:  h.handler(a),
				Store:    a.Store,
				Config:   inbox.Config{Consumer: Consumers[h.name], Publisher: a.Publisher},
				Message:  msg,
				Snapshot: a.books,
				Reset:    a.deleteRows,
			}, &handlertest.Options{Recorder: recorder})
		})
	}
}

// kitApp returns an App with its tables and its buses, on an inbox.Publisher over a
// Recorder: no router and no RabbitMQ, which the kit does without.
func kitApp(t *testing.T) (*App, *handlertest.Recorder) {
	t.Helper()
	ctx := context.Background()
	a := newApp(Options{Pool: e2e.Pool(t), Prefix: testenv.Name("cqrs")})
	t.Cleanup(func() {
		if err := a.DropTables(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	if err := a.createTables(ctx); err != nil {
		t.Fatal(err)
	}
	recorder := handlertest.NewRecorder()
	if err := a.newBuses(recorder); err != nil {
		t.Fatal(err)
	}
	return a, recorder
}

// invoice and receipt are rows of the App's tables, as the kit compares them.
type (
	invoice struct {
		OrderID     string
		AmountCents int64
	}
	receipt struct{ OrderID, EventUUID string }
)

// books is what the four handlers change.
type books struct {
	Invoices  []invoice
	Receipts  []receipt
	Emails    []string // order IDs
	Shipments []string // order IDs
}

// books reads every table the handlers write to, ordered.
func (a *App) books(ctx context.Context) (any, error) {
	var b books
	var err error
	if b.Invoices, err = selectRows(ctx, a, "SELECT order_id, amount_cents FROM "+a.Tables.Invoices+" ORDER BY 1, 2", pgx.RowToStructByPos[invoice]); err != nil {
		return nil, err
	}
	if b.Receipts, err = selectRows(ctx, a, "SELECT order_id, event_uuid FROM "+a.Tables.Receipts+" ORDER BY 1, 2", pgx.RowToStructByPos[receipt]); err != nil {
		return nil, err
	}
	if b.Emails, err = selectRows(ctx, a, "SELECT order_id FROM "+a.Tables.Emails+" ORDER BY 1", pgx.RowTo[string]); err != nil {
		return nil, err
	}
	b.Shipments, err = selectRows(ctx, a, "SELECT order_id FROM "+a.Tables.Shipments+" ORDER BY 1", pgx.RowTo[string])
	return b, err
}

// selectRows runs query on the pool and collects its rows with scan.
func selectRows[T any](ctx context.Context, a *App, query string, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := a.opts.Pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// deleteRows deletes what the handlers wrote.
func (a *App) deleteRows(ctx context.Context) error {
	_, err := a.opts.Pool.Exec(ctx, "DELETE FROM "+a.Tables.Invoices+"; DELETE FROM "+a.Tables.Receipts+
		"; DELETE FROM "+a.Tables.Emails+"; DELETE FROM "+a.Tables.Shipments)
	return err
}

package integration

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// The handlers the kit is tested with. Each writes the order's invoice and ledger line,
// publishes InvoiceIssued through the inbox.Publisher, returns a receipt and charges the
// order with the fake payment client; the correct ones keep the inbox's three rules, each
// buggy one breaks one.

// writeMode is how a handler writes: through the inbox transaction, or queued.
type writeMode int

const (
	throughTx writeMode = iota // inbox.TxFromContext
	queued                     // inbox.ExecAtCommit (claim-first with Queue, and write-behind)
)

// write writes the order's row into table the way mode says.
func (f *kitFixture) write(ctx context.Context, mode writeMode, table string, o order) error {
	if mode == queued {
		return inbox.ExecAtCommit(ctx, f.placeholders(insert(table)), o.OrderID, o.Cents)
	}
	tx, ok := f.inTx(ctx)
	if !ok {
		return errNoTx
	}
	return tx.exec(ctx, insert(table), o.OrderID, o.Cents)
}

// publishIssued publishes InvoiceIssued through the inbox.Publisher, in the handler's claim.
func (f *kitFixture) publishIssued(msg *message.Message, o order) error {
	event := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"`+o.OrderID+`"}`))
	event.SetContext(msg.Context())
	return f.publisher.Publish("invoices", event)
}

func receipt() []*message.Message {
	return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("receipt"))}
}

// billing is the correct handler, writing as mode says.
func (f *kitFixture) billing(mode writeMode) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := decodeOrder(msg)
		if err != nil {
			return nil, err
		}
		ctx := msg.Context()
		key, _ := inbox.KeyFromContext(ctx)
		f.payments.charge(key)
		if err := f.write(ctx, mode, f.invoices, o); err != nil {
			return nil, err
		}
		if err := f.write(ctx, mode, f.ledger, o); err != nil {
			return nil, err
		}
		if err := f.publishIssued(msg, o); err != nil {
			return nil, err
		}
		return receipt(), nil
	}
}

// buggy is billing with one step replaced: ledger writes the ledger line, publish sends
// InvoiceIssued, charge calls the payment client, after runs once the writes are done.
type buggy struct {
	ledger  func(ctx context.Context, o order) error
	publish func(msg *message.Message, o order) error
	charge  func(ctx context.Context)
	after   func(ctx context.Context) error
	// start runs first.
	start func(ctx context.Context, o order)
}

func (f *kitFixture) buggy(b buggy) message.HandlerFunc {
	if b.ledger == nil {
		b.ledger = func(ctx context.Context, o order) error { return f.write(ctx, throughTx, f.ledger, o) }
	}
	if b.publish == nil {
		b.publish = f.publishIssued
	}
	if b.charge == nil {
		b.charge = func(ctx context.Context) {
			key, _ := inbox.KeyFromContext(ctx)
			f.payments.charge(key)
		}
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := decodeOrder(msg)
		if err != nil {
			return nil, err
		}
		ctx := msg.Context()
		if b.start != nil {
			b.start(ctx, o)
		}
		b.charge(ctx)
		if err := f.write(ctx, throughTx, f.invoices, o); err != nil {
			return nil, err
		}
		if err := b.ledger(ctx, o); err != nil {
			return nil, err
		}
		if b.after != nil {
			if err := b.after(ctx); err != nil {
				return nil, err
			}
		}
		if err := b.publish(msg, o); err != nil {
			return nil, err
		}
		return receipt(), nil
	}
}

// ledgerOnThePool writes the ledger line through the application's pool: a repository
// built at start-up on the pool, not on the inbox transaction.
func (f *kitFixture) ledgerOnThePool() message.HandlerFunc {
	return f.buggy(buggy{ledger: func(ctx context.Context, o order) error {
		return f.pool.exec(ctx, insert(f.ledger), o.OrderID, o.Cents)
	}})
}

// everythingOnThePool never touches the inbox transaction.
func (f *kitFixture) everythingOnThePool() message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		o, err := decodeOrder(msg)
		if err != nil {
			return nil, err
		}
		return nil, f.pool.exec(msg.Context(), insert(f.invoices), o.OrderID, o.Cents)
	}
}

// brokerPublisher publishes InvoiceIssued with the broker's publisher (here the Recorder
// itself, which the inbox.Publisher wraps) under a fresh UUID.
func (f *kitFixture) brokerPublisher() message.HandlerFunc {
	return f.buggy(buggy{publish: func(_ *message.Message, o order) error {
		return f.recorder.Publish("invoices", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"`+o.OrderID+`"}`)))
	}})
}

// auditInAGoroutine starts a goroutine that writes an audit line after the handler
// returned, through the pool (the transaction is over by then), with the message's context.
func (f *kitFixture) auditInAGoroutine() message.HandlerFunc {
	return f.buggy(buggy{start: func(ctx context.Context, o order) {
		f.background.later(func() {
			_ = f.pool.exec(context.WithoutCancel(ctx), insert(f.audit), o.OrderID, o.Cents)
		})
	}})
}

// auditAfterTheNextReset is auditInAGoroutine whose goroutine writes once the kit's next
// Reset has deleted the rows, before its Snapshot reads them.
func (f *kitFixture) auditAfterTheNextReset() message.HandlerFunc {
	return f.buggy(buggy{start: func(ctx context.Context, o order) {
		f.afterReset.later(func() {
			_ = f.pool.exec(context.WithoutCancel(ctx), insert(f.audit), o.OrderID, o.Cents)
		})
	}})
}

// publishesElsewhere publishes InvoiceIssued through an inbox.Publisher of its own, over
// another publisher than the Recorder (the broker's, in production), which it also gives
// the middleware as Config.Publisher.
func (f *kitFixture) publishesElsewhere(publisher *inbox.Publisher) message.HandlerFunc {
	return f.buggy(buggy{publish: func(msg *message.Message, o order) error {
		event := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":"`+o.OrderID+`"}`))
		event.SetContext(msg.Context())
		return publisher.Publish("invoices", event)
	}})
}

// chargesLargeOrders is the correct handler, but for its external call: it charges the
// payment client only for orders above 10,000 cents, which the kit's order is not.
func (f *kitFixture) chargesLargeOrders() message.HandlerFunc {
	return f.buggy(buggy{charge: func(ctx context.Context) {}, start: func(ctx context.Context, o order) {
		if o.Cents > 10_000 {
			key, _ := inbox.KeyFromContext(ctx)
			f.payments.charge(key)
		}
	}})
}

// auditInAGoroutineThroughTheTx is auditInAGoroutine writing through the inbox transaction
// it took from the context.
func (f *kitFixture) auditInAGoroutineThroughTheTx() message.HandlerFunc {
	return f.buggy(buggy{start: func(ctx context.Context, o order) {
		tx, ok := f.inTx(ctx)
		if !ok {
			return
		}
		f.background.later(func() {
			_ = tx.exec(context.WithoutCancel(ctx), insert(f.audit), o.OrderID, o.Cents)
		})
	}})
}

// chargeWithoutKey calls the payment client with no idempotency key.
func (f *kitFixture) chargeWithoutKey() message.HandlerFunc {
	return f.buggy(buggy{charge: func(context.Context) { f.payments.charge("") }})
}

// chargeWithNewKey calls the payment client with a key of its own, new on every attempt.
func (f *kitFixture) chargeWithNewKey() message.HandlerFunc {
	return f.buggy(buggy{charge: func(context.Context) { f.payments.charge(watermill.NewUUID()) }})
}

// commitsItself commits the inbox transaction after its writes, as a data layer's Commit
// does.
func (f *kitFixture) commitsItself() message.HandlerFunc {
	return f.buggy(buggy{after: f.commitTx})
}

// errBroken is what a handler returns for a message it cannot process.
var errBroken = errors.New("broken")

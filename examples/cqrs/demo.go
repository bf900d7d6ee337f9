package main

// This file makes the program a demonstration: it sends the orders through a broker that
// copies and loses messages, waits until everything is through, prints what the tables hold
// and a verdict, and fails unless every command had exactly one effect. A service needs
// none of it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// run invoices orders the way an at-least-once broker and a flaky network treat them: every
// message is sent 1-3 times (copies under one UUID), the IssueInvoice handler of every fifth
// order fails after it published, on its first run, and some publishes of InvoiceIssued
// fail. Every other order is shipped too. It then prints what the tables hold and a verdict,
// and returns an error unless every command had exactly one effect.
func run(ctx context.Context, amqpURL, postgres string, orders int, out io.Writer) error {
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	broker := &copyingBroker{failEvery: 4, failures: orders / 10}
	app, err := NewApp(ctx, Options{AMQPURL: amqpURL, Pool: pool,
		WrapPublisher:    func(p message.Publisher) message.Publisher { broker.Publisher = p; return broker },
		FailAfterPublish: func(orderID string, run int) bool { return run == 1 && strings.HasSuffix(orderID, "5") }})
	if err != nil {
		return err
	}
	broker.failTopic = app.Topics.Events
	defer func() {
		_ = app.DropTables(context.WithoutCancel(ctx))
		_ = app.DeleteTopology()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Router.Run(ctx) }()
	<-app.Router.Running()

	if err := sendOrders(ctx, app, orders); err != nil {
		return err
	}
	if err := waitUntilThrough(ctx, app, orders); err != nil {
		return err
	}
	if err := app.Router.Close(); err != nil { // waits for the handlers still running
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	if err := printTables(ctx, app, out); err != nil {
		return err
	}
	return verdict(ctx, app, broker, orders, out)
}

// sendOrders sends IssueInvoice for every order, and OrderShipped for every other one. Not
// from a handler: inbox.WithPublishNow has the buses publish at once.
func sendOrders(ctx context.Context, app *App, orders int) error {
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		if err := app.CommandBus.Send(inbox.WithPublishNow(ctx), &IssueInvoice{OrderID: order, AmountCents: int64(100 + i)}); err != nil {
			return err
		}
		if shipped(i) {
			if err := app.EventBus.Publish(inbox.WithPublishNow(ctx), &OrderShipped{OrderID: order}); err != nil {
				return err
			}
		}
	}
	return nil
}

// shipped says whether order number i ships: every other one.
func shipped(i int) bool { return i%2 == 0 }

// waitUntilThrough waits until every receipt is e-mailed, no message is left waiting in a
// queue and none is in a handler: the copies are through.
func waitUntilThrough(ctx context.Context, app *App, orders int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		emails, err := app.Count(ctx, app.Tables.Emails, "")
		if err != nil {
			return err
		}
		empty, err := app.QueuesEmpty()
		if err != nil {
			return err
		}
		if emails >= orders && empty && app.inFlight.Load() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d receipts e-mailed after a minute", emails, orders)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// printTables prints how many rows each table holds.
func printTables(ctx context.Context, app *App, out io.Writer) error {
	for _, table := range []string{app.Tables.Invoices, app.Tables.Receipts, app.Tables.Emails, app.Tables.Shipments, app.Tables.Inbox} {
		n, err := app.Count(ctx, table, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-40s %d rows\n", table, n)
	}
	return nil
}

// verdict checks one invoice, one receipt and one e-mail per order, one shipment per
// shipped order, and nothing poisoned, and prints the faults the run survived.
func verdict(ctx context.Context, app *App, broker *copyingBroker, orders int, out io.Writer) error {
	var wrong []string
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		want := map[string]int{app.Tables.Invoices: 1, app.Tables.Receipts: 1, app.Tables.Emails: 1, app.Tables.Shipments: 0}
		if shipped(i) {
			want[app.Tables.Shipments] = 1
		}
		for _, table := range []string{app.Tables.Invoices, app.Tables.Receipts, app.Tables.Emails, app.Tables.Shipments} {
			n, err := app.Count(ctx, table, order)
			if err != nil {
				return err
			}
			if n != want[table] {
				wrong = append(wrong, fmt.Sprintf("%s: %d rows in %s, want %d", order, n, table, want[table]))
			}
		}
	}
	if n := app.Poisoned.Count(); n > 0 {
		wrong = append(wrong, fmt.Sprintf("%d messages poisoned: %s", n, strings.Join(app.Poisoned.Reasons(), "; ")))
	}
	sent, copies, failed := broker.counts()
	faults := fmt.Sprintf("%d messages sent %d times, %d IssueInvoice runs failed after publishing, %d publishes failed",
		sent, sent+copies, app.failedRuns(), failed)
	if len(wrong) > 0 {
		return fmt.Errorf("not one effect per command (%s): %s", faults, strings.Join(wrong, "; "))
	}
	fmt.Fprintf(out, "verdict: every command had exactly one effect (%d orders; %s)\n", orders, faults)
	return nil
}

// copyingBroker is the publisher the inbox.Publisher publishes through, made to act as an
// at-least-once broker and a flaky network: every message it accepts is sent 1-3 times, and
// while failures last, every failEvery-th publish of InvoiceIssued to failTopic fails with
// nothing sent.
type copyingBroker struct {
	message.Publisher
	failTopic string
	failEvery int

	mu                            sync.Mutex
	calls, failures               int
	sent, copies, failedPublishes int
}

func (b *copyingBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	b.calls++
	if topic == b.failTopic && Marshaler.NameFromMessage(msgs[0]) == Marshaler.Name(&InvoiceIssued{}) &&
		b.failures > 0 && b.calls%b.failEvery == 0 {
		b.failures--
		b.failedPublishes++
		b.mu.Unlock()
		return errors.New("connection reset by peer")
	}
	copies := rand.IntN(3)
	b.sent += len(msgs)
	b.copies += copies * len(msgs)
	b.mu.Unlock()
	for range 1 + copies {
		if err := b.Publisher.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	return nil
}

func (b *copyingBroker) counts() (sent, copies, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent, b.copies, b.failedPublishes
}

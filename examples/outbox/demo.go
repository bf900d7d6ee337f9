package main

// This file makes the program a demonstration: it publishes orders with copies, fails the
// first run of some of them after they published, waits for the events at the destination,
// prints what happened, and fails unless every order has one invoice and one event. A
// service needs none of it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
)

func run(ctx context.Context, postgres string, orders int, out io.Writer) error {
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	s := NewSystem()
	defer s.DropTables(context.WithoutCancel(ctx), pool)

	// Every 10th order's first run fails after it has written its invoice and its event: the
	// inbox rolls all of it back, the Go channel delivers the order again, and only the event
	// of the run that commits ever reaches the destination.
	placed := make([]OrderPlaced, orders)
	failing := &firstRunFailures{orders: map[string]bool{}, failed: map[string]bool{}}
	for i := range placed {
		placed[i] = OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rand.IntN(10000))}
		failing.orders[placed[i].OrderID] = i%10 == 0
	}
	if err := s.Build(ctx, pool, failing.wrap); err != nil {
		return err
	}
	events, err := s.Events.Subscribe(ctx, EventsTopic)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Close()

	published, err := publishOrders(s.Orders, placed)
	if err != nil {
		return err
	}
	delivered, err := waitForEvents(events, orders)
	if err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	return report(ctx, s, pool, orders, published, failing.count(), delivered, out)
}

// firstRunFailures fails the first run of the orders it names, after the handler has
// written the invoice and published the event.
type firstRunFailures struct {
	orders map[string]bool // filled before the first publish, read-only after

	mu     sync.Mutex
	failed map[string]bool
}

func (f *firstRunFailures) wrap(h func(*message.Message) error) func(*message.Message) error {
	return func(msg *message.Message) error {
		if err := h(msg); err != nil || !f.orders[msg.UUID] {
			return err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.failed[msg.UUID] {
			return nil
		}
		f.failed[msg.UUID] = true
		return errors.New("first run fails on purpose, after publishing")
	}
}

func (f *firstRunFailures) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.failed)
}

// publishOrders publishes every order 1-3 times and returns how many messages it published.
func publishOrders(pub message.Publisher, orders []OrderPlaced) (int, error) {
	published := 0
	for _, order := range orders {
		for range 1 + rand.IntN(3) {
			msg, err := newOrderMessage(order)
			if err != nil {
				return 0, err
			}
			if err := pub.Publish(OrdersTopic, msg); err != nil {
				return 0, err
			}
			published++
		}
	}
	return published, nil
}

// waitForEvents acks the InvoiceCreated events that arrive until every order has one, and
// returns how many arrived.
func waitForEvents(events <-chan *message.Message, orders int) (int, error) {
	delivered, invoiced := 0, map[string]bool{}
	timeout := time.After(60 * time.Second)
	for len(invoiced) < orders {
		select {
		case event := <-events:
			delivered++
			invoiced[event.Metadata.Get("order_id")] = true
			event.Ack()
		case <-timeout:
			return 0, fmt.Errorf("after 60s: InvoiceCreated for %d of %d orders", len(invoiced), orders)
		}
	}
	return delivered, nil
}

// report prints the counts and fails unless every order has exactly one invoice and one
// event in the outbox.
func report(ctx context.Context, s *System, pool *pgxpool.Pool, orders, published, rolledBack, delivered int, out io.Writer) error {
	invoices, _, err := s.InvoiceCounts(ctx, pool)
	if err != nil {
		return err
	}
	inOutbox, err := s.OutboxCount(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", orders)
	fmt.Fprintf(tw, "messages published\t%d\t\n", published)
	fmt.Fprintf(tw, "runs rolled back after publishing\t%d\t\n", rolledBack)
	fmt.Fprintf(tw, "invoices created\t%d\t\n", invoices)
	fmt.Fprintf(tw, "events in the outbox\t%d\t\n", inOutbox)
	fmt.Fprintf(tw, "events delivered\t%d\t\n", delivered)
	if err := tw.Flush(); err != nil {
		return err
	}
	if invoices != orders || inOutbox != orders {
		return fmt.Errorf("%d invoices and %d outbox events for %d orders", invoices, inOutbox, orders)
	}
	return nil
}

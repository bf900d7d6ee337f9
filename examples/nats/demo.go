package main

// This file is the same in every broker example. It makes the program a demonstration: it
// names the topic and the tables so that no other run uses them, publishes every order 1-3
// times, counts what the router did, prints it, and fails unless every order got exactly one
// invoice. A service needs none of it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

// demo is one run of the program.
type demo struct {
	pool *pgxpool.Pool
	// topic is orders_<random>, so that what a crashed run left on the broker never reaches
	// this one; the tables are inbox_<random> and invoices_<random>, dropped at the end.
	topic, inboxTable, invoiceTable string
	// poisoned holds what the poison queue takes, in memory: a run leaves nothing on the
	// broker, and any poisoned message fails it.
	poisoned         *heldMessages
	deliveries, runs atomic.Int64
}

func newDemo(pool *pgxpool.Pool) *demo {
	suffix := strconv.FormatUint(rand.Uint64(), 36)
	return &demo{pool: pool, topic: "orders_" + suffix, inboxTable: "inbox_" + suffix,
		invoiceTable: "invoices_" + suffix, poisoned: &heldMessages{}}
}

// countDeliveries is a middleware that counts the deliveries handled without an error,
// copies included. A delivery counts once it is done and about to be acked, so that the
// router closes only when no copy is in flight: a copy cancelled by the close would fail
// every retry and be poisoned.
func (d *demo) countDeliveries(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil {
			d.deliveries.Add(1)
		}
		return out, err
	}
}

// countRuns counts the runs of h that succeed: inside the inbox transaction, once per order.
func (d *demo) countRuns(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if err := h(msg); err != nil {
			return err
		}
		d.runs.Add(1)
		return nil
	}
}

// run runs the router, publishes the orders, waits until every order is invoiced and every
// message delivered, closes the router and reports.
func (d *demo) run(ctx context.Context, router *message.Router, publisher message.Publisher, orders int, out io.Writer) error {
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	defer router.Close()
	select {
	case <-router.Running():
	case err := <-runErr:
		return fmt.Errorf("router: %w", err)
	}
	published, err := publishOrders(publisher, d.topic, orders)
	if err != nil {
		return err
	}
	if err := d.wait(ctx, orders, published); err != nil {
		return err
	}
	if err := router.Close(); err != nil {
		return err
	}
	return d.report(ctx, orders, published, out)
}

// wait polls the counters until every order ran and every message was delivered.
func (d *demo) wait(ctx context.Context, orders, published int) error {
	deadline := time.Now().Add(60 * time.Second)
	for d.runs.Load() < int64(orders) || d.deliveries.Load() < int64(published) {
		if time.Now().After(deadline) {
			return fmt.Errorf("after 60s: %d of %d orders processed, %d of %d messages delivered",
				d.runs.Load(), orders, d.deliveries.Load(), published)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// report prints the counts and fails unless every order got exactly one invoice and no
// message was poisoned.
func (d *demo) report(ctx context.Context, orders, published int, out io.Writer) error {
	var invoices int
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.invoiceTable).Scan(&invoices); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", orders)
	fmt.Fprintf(tw, "messages published\t%d\t\n", published)
	fmt.Fprintf(tw, "deliveries\t%d\t\n", d.deliveries.Load())
	fmt.Fprintf(tw, "invoices created\t%d\t\n", invoices)
	fmt.Fprintf(tw, "duplicates skipped\t%d\t\n", d.deliveries.Load()-d.runs.Load())
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := d.poisoned.count(); n > 0 {
		return fmt.Errorf("%d messages poisoned: %s", n, strings.Join(d.poisoned.reasons(), "; "))
	}
	if invoices != orders {
		return fmt.Errorf("%d invoices for %d orders", invoices, orders)
	}
	return nil
}

// dropTables drops the inbox and invoice tables of the run.
func (d *demo) dropTables(ctx context.Context) error {
	_, err := d.pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+d.inboxTable+", "+d.invoiceTable)
	return err
}

// publishOrders publishes n orders, each 1-3 times, the copies of every other order from
// separate goroutines at once. It returns how many messages it published.
func publishOrders(pub message.Publisher, topic string, n int) (int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	published := 0
	for i := range n {
		order := OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rand.IntN(10000))}
		payload, err := json.Marshal(order)
		if err != nil {
			return 0, err
		}
		for range 1 + rand.IntN(3) {
			msg := message.NewMessage(order.OrderID, payload) // every copy: the order's ID as UUID
			send := func() {
				if err := pub.Publish(topic, msg); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
			if published++; i%2 == 0 {
				wg.Go(send)
			} else {
				send()
			}
		}
	}
	wg.Wait()
	return published, errors.Join(errs...)
}

// heldMessages is a message.Publisher that keeps what is published to it in memory.
type heldMessages struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (h *heldMessages) Publish(_ string, msgs ...*message.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgs...)
	return nil
}

func (h *heldMessages) Close() error { return nil }

func (h *heldMessages) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// reasons returns the distinct reasons the poison queue gave, in the order first seen.
func (h *heldMessages) reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var reasons []string
	for _, msg := range h.msgs {
		if r := msg.Metadata.Get(middleware.ReasonForPoisonedKey); !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return reasons
}

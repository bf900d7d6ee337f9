package main

// This file makes the program a demonstration: it publishes the orders with copies, counts
// what the router did and checks the invoices. A service needs none of it.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// result is what one run did.
type result struct {
	Orders     int // unique orders published
	Deliveries int // messages handled, copies included
	Invoices   int // invoice rows written
	Duplicates int // deliveries the inbox skipped
}

// counter counts the deliveries the router handled and the handler runs among them.
type counter struct {
	delivered, ran atomic.Int64
	published      atomic.Int64 // messages published, once known; -1 until then
	allHandled     chan struct{}
	closeOnce      sync.Once
}

func newCounter() *counter {
	c := &counter{allHandled: make(chan struct{})}
	c.published.Store(-1)
	return c
}

// deliveries is a middleware that counts each message handled without an error, copies
// included, and tells check when all published messages are.
func (c *counter) deliveries(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil && c.delivered.Add(1) == c.published.Load() {
			c.closeOnce.Do(func() { close(c.allHandled) })
		}
		return out, err
	}
}

// runs counts the runs of h that succeed: inside the inbox transaction, once per order.
func (c *counter) runs(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if err := h(msg); err != nil {
			return err
		}
		c.ran.Add(1)
		return nil
	}
}

// check publishes the orders, waits until every message is handled, stops the router,
// prints what happened, and fails unless every order got exactly one invoice.
func check(ctx context.Context, db *sql.DB, router *message.Router, pub message.Publisher, c *counter, orders int, out io.Writer) (result, error) {
	published, err := publishOrders(pub, orders)
	if err != nil {
		return result{}, err
	}
	if c.published.Store(int64(published)); c.delivered.Load() == int64(published) {
		c.closeOnce.Do(func() { close(c.allHandled) })
	}
	select {
	case <-c.allHandled:
	case <-time.After(30 * time.Second):
		return result{}, fmt.Errorf("only %d of %d messages handled after 30s", c.delivered.Load(), published)
	}
	if err := router.Close(); err != nil {
		return result{}, err
	}
	res := result{Orders: orders, Deliveries: int(c.delivered.Load()), Duplicates: int(c.delivered.Load() - c.ran.Load())}
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM invoices").Scan(&res.Invoices); err != nil {
		return result{}, err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", res.Orders)
	fmt.Fprintf(tw, "deliveries\t%d\t\n", res.Deliveries)
	fmt.Fprintf(tw, "invoices created\t%d\t\n", res.Invoices)
	fmt.Fprintf(tw, "duplicates skipped\t%d\t\n", res.Duplicates)
	if err := tw.Flush(); err != nil {
		return result{}, err
	}
	if res.Invoices != res.Orders {
		return res, fmt.Errorf("%d invoices for %d orders", res.Invoices, res.Orders)
	}
	return res, nil
}

// publishOrders publishes every order 1-3 times, the copies of every other order from
// separate goroutines at once, and returns how many messages it published.
func publishOrders(pub message.Publisher, orders int) (int, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	var publishErr atomic.Pointer[error]
	published := 0
	for i := range orders {
		order := OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rng.IntN(10000))}
		payload, err := json.Marshal(order)
		if err != nil {
			return 0, err
		}
		for range 1 + rng.IntN(3) {
			msg := message.NewMessage(order.OrderID, payload) // the same UUID for every copy
			publish := func() {
				if err := pub.Publish(topic, msg); err != nil {
					publishErr.CompareAndSwap(nil, &err)
				}
			}
			if published++; i%2 == 0 {
				wg.Go(publish)
			} else {
				publish()
			}
		}
	}
	wg.Wait()
	if err := publishErr.Load(); err != nil {
		return 0, *err
	}
	return published, nil
}

package main

// This file makes the program a demonstration: it sends the orders by HTTP, through the
// broker and both ways, with retries and copies at once, and checks the invoices. A service
// needs none of it.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// tally is what the demonstration's clients got.
type tally struct{ created, replayed, conflicts, published, poisoned atomic.Int64 }

// demo sends orders, one of three ways each: by HTTP 2 or 3 times, the copies at once;
// through the broker twice; by HTTP and then through the broker with the same key. It fails
// unless every order got exactly one invoice.
func demo(ctx context.Context, db *sql.DB, endpoint http.Handler, pubSub *gochannel.GoChannel, orders int) error {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &http.Server{Handler: endpoint, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	defer server.Close()
	url := "http://" + listener.Addr().String() + "/orders"

	var t tally
	poisoned, err := pubSub.Subscribe(ctx, topic+"_poison")
	if err != nil {
		return err
	}
	go func() {
		for m := range poisoned {
			t.poisoned.Add(1)
			m.Ack()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, orders*4)
	for i := range orders {
		order := Order{OrderID: fmt.Sprintf("order-%04d", i), AmountCents: int64(100 + i)}
		switch i % 3 {
		case 0:
			for range 1 + i%2 + 1 {
				wg.Go(func() { errs <- postOrder(ctx, url, order, &t) })
			}
		case 1:
			errs <- publishOrder(pubSub, order, 2, &t)
		case 2:
			errs <- postOrder(ctx, url, order, &t)
			errs <- publishOrder(pubSub, order, 1, &t)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return report(ctx, db, orders, &t)
}

// postOrder posts order as the customer acme, with its ID as the key, until it is answered 201 (a 409 says a copy
// is still running: send it again).
func postOrder(ctx context.Context, url string, order Order, t *tally) error {
	body, _ := json.Marshal(order) // an Order always marshals
	for range 50 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", `"`+order.OrderID+`"`)
		req.Header.Set("Authorization", "Bearer demo-token-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated, http.StatusNoContent:
			if resp.Header.Get("Idempotent-Replayed") == "true" {
				t.replayed.Add(1)
			} else {
				t.created.Add(1)
			}
			return nil
		case http.StatusConflict:
			t.conflicts.Add(1)
			time.Sleep(20 * time.Millisecond) // a client's back-off
		default:
			return fmt.Errorf("POST %s: %d %s", order.OrderID, resp.StatusCode, answer)
		}
	}
	return fmt.Errorf("POST %s: still in flight after 50 tries", order.OrderID)
}

// publishOrder publishes order copies times, each a message of the customer acme whose UUID is
// the order's key.
func publishOrder(pub message.Publisher, order Order, copies int, t *tally) error {
	payload, _ := json.Marshal(order) // an Order always marshals
	for range copies {
		msg := message.NewMessage(order.OrderID, payload)
		msg.Metadata.Set("customer", "acme")
		if err := pub.Publish(topic, msg); err != nil {
			return err
		}
		t.published.Add(1)
	}
	return nil
}

// report waits for the broker's messages to be invoiced, prints what happened and checks one
// invoice per order.
func report(ctx context.Context, db *sql.DB, orders int, t *tally) error {
	var invoices, distinct int
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT order_id) FROM invoices").Scan(&invoices, &distinct)
		if err != nil {
			return err
		}
		if distinct == orders || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the broker's messages are handled asynchronously
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "orders\t%d\n", orders)
	fmt.Fprintf(w, "requests answered 201 by the handler\t%d\n", t.created.Load())
	fmt.Fprintf(w, "requests answered with the replay\t%d\n", t.replayed.Load())
	fmt.Fprintf(w, "requests answered 409 and sent again\t%d\n", t.conflicts.Load())
	fmt.Fprintf(w, "messages published\t%d\n", t.published.Load())
	fmt.Fprintf(w, "messages poisoned\t%d\n", t.poisoned.Load())
	fmt.Fprintf(w, "invoices\t%d\n", invoices)
	_ = w.Flush()
	if invoices != orders || distinct != orders || t.poisoned.Load() != 0 {
		return fmt.Errorf("%d invoices for %d orders (%d distinct), %d messages poisoned", invoices, orders, distinct, t.poisoned.Load())
	}
	fmt.Println("every order has exactly one invoice")
	return nil
}

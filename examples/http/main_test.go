package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// TestHTTPProgram runs the demonstration as .ci/run does: every order, sent by HTTP, through
// the broker or both ways, has one invoice (run fails otherwise).
func TestHTTPProgram(t *testing.T) {
	if err := run(context.Background(), t.TempDir(), "", 90); err != nil {
		t.Fatal(err)
	}
}

// An order taken by HTTP, then delivered through the broker with the same key: one invoice,
// and the copy is acked as a duplicate: the router never gets the recorded HTTP response
// back, which a handler without a publisher refuses (message.ErrOutputInNoPublisherHandler),
// so that the copy would be retried and poisoned.
func TestOrderByHTTPThenByBroker(t *testing.T) {
	ctx := context.Background()
	db, store := openOrders(t)
	endpoint, err := newEndpoint(store)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(endpoint)
	t.Cleanup(server.Close)
	ready, err := server.Client().Get(server.URL + "/readyz")
	if err != nil || ready.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %v %v, want 200", ready, err)
	}
	ready.Body.Close()
	body, _ := json.Marshal(Order{OrderID: "order-7", AmountCents: 700})
	req, _ := http.NewRequest(http.MethodPost, server.URL+"/orders", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", `"order-7"`)
	req.Header.Set("Authorization", "Bearer demo-token-acme")
	resp, err := server.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %v %v", resp, err)
	}
	resp.Body.Close()

	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	// A copy the stack poisons is reported here, acked so that the order's Publish returns.
	poisoned, err := pubSub.Subscribe(ctx, topic+"_poison")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range poisoned {
			t.Errorf("the broker's copy was poisoned: %s", m.Metadata.Get("reason_poisoned"))
			m.Ack()
		}
	}()
	router, err := newRouter(store, pubSub)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = router.Run(ctx) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()
	acked := make(chan error, 1)
	copyOfOrder := message.NewMessage("order-7", body)
	copyOfOrder.Metadata.Set("customer", "acme")
	go func() { acked <- pubSub.Publish(topic, copyOfOrder) }() // returns once acked
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the broker's copy of the order was not acked")
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM invoices WHERE order_id = 'order-7'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d invoices, %v; want 1", n, err)
	}
}

// openOrders opens the program's database and store in a directory of the test's.
func openOrders(t *testing.T) (*sql.DB, *sqlinbox.Store) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "o.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := sqlinbox.NewDB(db, sqlinbox.SQLite{}, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE invoices (order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return db, store
}

// Command http serves one order endpoint two ways from one inbox store: POST /orders with an
// Idempotency-Key, and the orders topic of a broker (here Watermill's Go channel), both
// under the consumer "billing", so that an order sent by HTTP and again through the broker
// with the same key is invoiced once. The database is a SQLite file.
//
//	go run ./examples/http                    # sends orders both ways, with retries, and checks the invoices
//	go run ./examples/http -listen :8080      # serves until interrupted (README.md has a curl session)
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

const topic = "orders"

func main() {
	listen := flag.String("listen", "", "serve on this address until interrupted, instead of the demonstration")
	orders := flag.Int("orders", 200, "orders the demonstration sends")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "inbox-http-")
	if err == nil {
		err = run(ctx, dir, *listen, *orders)
		os.RemoveAll(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
}

// run opens the store, starts the router and the HTTP server on it, and then serves until
// ctx is done (listen set) or runs the demonstration (demo.go).
func run(ctx context.Context, dir, listen string, orders int) error {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	store, err := sqlinbox.NewDB(db, sqlinbox.SQLite{}, sqlinbox.Config{})
	if err != nil {
		return err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return err
	}
	if err := store.CheckTable(ctx); err != nil { // refuse to start on a table or a driver that cannot work
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE invoices (order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)"); err != nil {
		return err
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := newRouter(store, pubSub)
	if err != nil {
		return err
	}
	go func() { _ = router.Run(ctx) }()
	defer router.Close()
	<-router.Running()
	endpoint, err := newEndpoint(store)
	if err != nil {
		return err
	}
	if listen != "" {
		return serve(ctx, listen, endpoint)
	}
	return demo(ctx, db, endpoint, pubSub, orders)
}

// newEndpoint is the HTTP side: POST /orders behind inboxhttp, the key required and scoped to
// the customer who sends it, so that two customers may use the same key. The body is
// fingerprinted as the broker's messages are (their payload's SHA-256), so that an order sent
// both ways under one key is one order. GET /readyz is the readiness probe: 503 with the
// reason while the database or the inbox table cannot work.
func newEndpoint(store *sqlinbox.Store) (http.Handler, error) {
	idempotent, err := inboxhttp.NewMiddleware(store, inboxhttp.Config{
		Consumer:    "billing",
		Scope:       customerOf, // whose key it is: the authenticated customer
		RequireKey:  true,
		Fingerprint: inboxhttp.BodySHA256,
	}, nil)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idempotent(http.HandlerFunc(createOrder)))
	mux.Handle("GET /readyz", inboxhttp.Ready(store))
	return mux, nil
}

// customers are the bearer tokens the demonstration knows, and the customer each
// authenticates; a service asks its authentication instead.
var customers = map[string]string{"Bearer demo-token-acme": "acme", "Bearer demo-token-globex": "globex"}

// customerOf is the endpoint's scope: the customer the request's bearer token authenticates.
// A request without a known token is refused (403) before its key is claimed.
func customerOf(r *http.Request) (string, error) {
	customer, ok := customers[r.Header.Get("Authorization")]
	if !ok {
		return "", errors.New("send a known bearer token")
	}
	return customer, nil
}

// orderKey is the broker side's key: the claim an order sent by HTTP has, by the message's
// customer and UUID, so that an order sent both ways is one order.
func orderKey(msg *message.Message) (string, error) {
	customer := msg.Metadata.Get("customer")
	if customer == "" {
		return "", fmt.Errorf("order %s has no customer", msg.UUID)
	}
	return inboxhttp.ScopedKey(customer, msg.UUID), nil
}

// serve serves handler on addr until ctx is done.
func serve(ctx context.Context, addr string, handler http.Handler) error {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("serving POST http://%s/orders\n", listener.Addr())
	go func() {
		<-ctx.Done()
		_ = server.Shutdown(context.WithoutCancel(ctx))
	}()
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newRouter is the broker side: handleOrder on the orders topic behind the inbox, in the
// recommended middleware stack.
func newRouter(store inbox.Store, pubSub *gochannel.GoChannel) (*message.Router, error) {
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", Key: orderKey}, nil)
	if err != nil {
		return nil, err
	}
	logger := watermill.NewStdLogger(false, false) // the retried and the poisoned failures, to stderr
	poisonQueue, err := middleware.PoisonQueueWithFilter(pubSub, topic+"_poison", inbox.Poisonous)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	retry := middleware.Retry{
		MaxRetries:      math.MaxInt32, // no count: inbox.ShouldRetry decides when to stop
		InitialInterval: 50 * time.Millisecond,
		Multiplier:      1.5,
		MaxInterval:     2 * time.Second,              // a database that is away is tried every 2 s
		ShouldRetry:     inbox.ShouldRetry(3, logger), // the message's own failure: 3 retries, then the poison queue
		Logger:          logger,                       // logs each failure it retries
	}
	router.AddMiddleware(
		poisonQueue,                        // outermost: takes the message's own failures, not the database's
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)
	router.AddConsumerHandler("billing", topic, pubSub, handleOrder)
	return router, nil
}

// Order is what both sides take: the request's body, the message's payload.
type Order struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// createOrder is the HTTP handler: it writes the invoice through the inbox transaction and
// answers 201 with the invoice; the answer leaves after the commit, and a retry with the
// same key gets it again, replayed.
func createOrder(w http.ResponseWriter, r *http.Request) {
	var order Order
	if err := json.NewDecoder(r.Body).Decode(&order); err != nil || order.OrderID == "" {
		http.Error(w, "want a JSON order with an order_id", http.StatusBadRequest)
		return
	}
	if err := invoice(r.Context(), order); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/invoices/"+order.OrderID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"invoice": order.OrderID, "amount_cents": order.AmountCents,
		"issued_at": time.Now().UTC().Format(time.RFC3339Nano)})
}

// handleOrder is the broker handler: the same invoice, through the same transaction.
func handleOrder(msg *message.Message) error {
	var order Order
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return fmt.Errorf("decode order %s: %w", msg.UUID, err)
	}
	return invoice(msg.Context(), order)
}

// invoice writes the order's invoice through the inbox transaction in ctx. An order whose ID
// starts with "slow-" takes two seconds, to show what a retry gets meanwhile.
func invoice(ctx context.Context, order Order) error {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok {
		return errors.New("no inbox transaction: run the handler behind the inbox")
	}
	if len(order.OrderID) > 5 && order.OrderID[:5] == "slow-" {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO invoices (order_id, amount_cents) VALUES (?, ?)", order.OrderID, order.AmountCents)
	return err
}

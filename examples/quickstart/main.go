// Command quickstart shows the inbox without any server: a Go channel as the broker and a
// SQLite file as the database. It publishes a few hundred orders, most of them more than
// once and some copies at the same moment, and checks that each order got exactly one
// invoice (check.go).
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

const topic = "orders"

func main() {
	dir, err := os.MkdirTemp("", "inbox-quickstart-")
	if err == nil {
		_, err = run(context.Background(), dir, 300, os.Stdout)
		os.RemoveAll(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run opens the database in dir and runs the handler behind the inbox; check publishes the
// orders and fails unless each got one invoice.
func run(ctx context.Context, dir string, orders int, out io.Writer) (result, error) {
	// SQLite allows one writer at a time: the busy timeout makes the others wait for it.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "quickstart.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	store, err := sqlinbox.NewDB(db, sqlinbox.SQLite{}, sqlinbox.Config{})
	if err != nil {
		return result{}, err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return result{}, err
	}
	if err := store.CheckTable(ctx); err != nil { // refuse to start on a table or a driver that cannot work
		return result{}, err
	}
	if err := createInvoices(ctx, db); err != nil {
		return result{}, err
	}

	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	count := newCounter() // check.go
	router, err := newRouter(store, pubSub, count)
	if err != nil {
		return result{}, err
	}
	go func() { _ = router.Run(ctx) }()
	defer router.Close()
	<-router.Running()
	return check(ctx, db, router, pubSub, count, orders, out)
}

// createInvoices creates the table handleOrder writes to. No UNIQUE on order_id, on
// purpose: the inbox alone keeps a second invoice out.
func createInvoices(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE invoices (order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)")
	return err
}

// newRouter runs handleOrder on the orders topic behind the inbox, in the recommended
// middleware stack.
func newRouter(store inbox.Store, pubSub *gochannel.GoChannel, count *counter) (*message.Router, error) {
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
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
	router.AddMiddleware(count.deliveries) // not part of the stack: counts deliveries for the table
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
	router.AddConsumerHandler("billing", topic, pubSub, count.runs(handleOrder))
	return router, nil
}

// OrderPlaced is the event on the orders topic, as JSON. Its message's UUID is the order
// ID, so that every copy of one order has the same inbox key.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// handleOrder writes the order's invoice through the inbox transaction: the invoice and the
// inbox claim commit or roll back together, and a copy of a committed order never gets here.
func handleOrder(msg *message.Message) error {
	var order OrderPlaced
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return fmt.Errorf("decode order %s: %w", msg.UUID, err)
	}
	tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
	if !ok {
		return errors.New("no inbox transaction: run the handler behind the inbox middleware")
	}
	_, err := tx.ExecContext(msg.Context(), "INSERT INTO invoices (order_id, amount_cents) VALUES (?, ?)",
		order.OrderID, order.AmountCents)
	return err
}

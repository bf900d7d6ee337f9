package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The main path: a router with the recommended middleware stack, the pgx store on
// PostgreSQL and a Go channel as the broker. One order arrives three times, as an
// at-least-once broker may deliver it; it is invoiced once.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, examplePostgresURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// Random table names, so that runs at the same time do not meet; dropped at the end.
	inboxTable, invoices := exampleName("inbox"), exampleName("invoices")
	defer pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+inboxTable+", "+invoices)
	if _, err := pool.Exec(ctx, "CREATE TABLE "+invoices+" (id bigserial PRIMARY KEY, order_id text NOT NULL)"); err != nil {
		panic(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		panic(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		panic(err)
	}

	logger := watermill.NopLogger{}
	// Publish returns once the message is acked, which makes the output deterministic.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		panic(err)
	}
	poisonQueue, err := middleware.PoisonQueueWithFilter(pubSub, "orders_poison", inbox.Poisonous)
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
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
	runs := 0
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return errors.New("no inbox transaction")
		}
		runs++
		_, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (order_id) VALUES ($1)", string(msg.Payload))
		return err
	})
	if err := store.CheckTable(ctx); err != nil { // refuse to start on a table or a driver that cannot work
		panic(err)
	}
	go func() { _ = router.Run(ctx) }()
	defer router.Close()
	<-router.Running()

	order := message.NewMessage(watermill.NewUUID(), []byte("order-1"))
	for range 3 { // the same message, UUID included, three times
		if err := pubSub.Publish("orders", order.Copy()); err != nil {
			panic(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+invoices).Scan(&n); err != nil {
		panic(err)
	}
	fmt.Printf("deliveries: 3, handler runs: %d, invoices: %d\n", runs, n)
	// Output: deliveries: 3, handler runs: 1, invoices: 1
}

// A handler reads the inbox transaction in its driver's type and writes through it.
func ExampleTxFromContext() {
	createInvoice := func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx) // *sql.Tx for a store made by sqlinbox.NewDB
		if !ok {
			return errors.New("no inbox transaction: is the inbox middleware on this handler?")
		}
		_, err := tx.Exec(ctx, "INSERT INTO invoices (order_id) VALUES ($1)", msg.UUID)
		return err // an error rolls back the invoice and the claim together
	}
	_ = createInvoice
}

// With database/sql the transaction is a *sql.Tx.
func ExampleTxFromContext_databaseSQL() {
	createInvoice := func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		if !ok {
			return errors.New("no inbox transaction")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO invoices (order_id) VALUES (?)", msg.UUID)
		return err
	}
	_ = createInvoice
}

// KeyFromContext gives the claimed key, to pass on to systems the transaction cannot roll
// back, so that they deduplicate a call made again after a rollback.
func ExampleKeyFromContext() {
	chargeCard := func(msg *message.Message) error {
		key, _ := inbox.KeyFromContext(msg.Context())
		_ = key // e.g. the Idempotency-Key header of a payment provider's API
		return nil
	}
	_ = chargeCard
}

// The poison queue's filter: the message's own failure is poisonous; a cancelled delivery (the
// router closing) is not, nor is an error the inbox middleware marked as its store's
// infrastructure failure (a database away, a missing table, a deadlock).
func ExamplePoisonous() {
	fmt.Println(inbox.Poisonous(fmt.Errorf("decode order: %w", errors.New("unexpected end of JSON input"))))
	fmt.Println(inbox.Poisonous(fmt.Errorf("publish: %w", context.Canceled)))
	fmt.Println(inbox.Poisonous(nil))
	// Output:
	// true
	// false
	// false
}

// Command redisstream runs an order handler behind the inbox on Redis Streams, with
// PostgreSQL as the database. It publishes orders 1-3 times each and fails unless every
// order got exactly one invoice (demo.go).
//
//	go run ./examples/redisstream -redis 127.0.0.1:6379
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	redisAddr := flag.String("redis", envOr("INBOX_TEST_REDIS_ADDR", "127.0.0.1:6379"),
		"Redis address (default $INBOX_TEST_REDIS_ADDR, or the shown value)")
	postgres := flag.String("postgres", envOr("INBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL (default $INBOX_TEST_POSTGRES_URL, or the shown value)")
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()
	if err := run(context.Background(), *redisAddr, *postgres, *orders, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "redisstream:", err)
		os.Exit(1)
	}
}

// run opens the broker and the database, builds the router with the inbox, and has the
// demo publish the orders and check the invoices; it removes what it created when it ends.
func run(ctx context.Context, redisAddr, postgres string, orders int, out io.Writer) (err error) {
	// Publisher and subscriber each close their own client.
	publisher, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client: redis.NewClient(&redis.Options{Addr: redisAddr}),
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer publisher.Close()
	subscriber, err := newSubscriber(redisAddr, 5*time.Second)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := newDemo(pool)
	defer func() { err = errors.Join(err, d.dropTables(ctx), removeStream(ctx, redisAddr, d.topic)) }()
	router, err := newRouter(ctx, pool, subscriber, d)
	if err != nil {
		return err
	}
	return d.run(ctx, router, publisher, orders, out)
}

// newSubscriber joins the consumer group "billing" as a new consumer. A nack makes the
// subscriber hand the message to the handler again at once. A message a consumer read but
// never acked stays pending in the group; once it has been idle for claimAfter, any
// consumer of the group claims it and gets it again, so a consumer that died does not lose
// its messages. claimAfter must be longer than the handler takes.
func newSubscriber(redisAddr string, claimAfter time.Duration) (*redisstream.Subscriber, error) {
	return redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        redis.NewClient(&redis.Options{Addr: redisAddr}), // closed by the subscriber
		ConsumerGroup: "billing",
		// Consumer: a random name per subscriber, the default.
		ClaimInterval: claimAfter / 5,
		MaxIdleTime:   claimAfter,
	}, watermill.NopLogger{})
}

// removeStream deletes the stream's key, and its consumer group with it.
func removeStream(ctx context.Context, redisAddr, stream string) error {
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer client.Close()
	return client.Del(context.WithoutCancel(ctx), stream).Err()
}

// newRouter runs handleOrder on the demo's topic behind the inbox, in the recommended
// middleware stack. The demo names the tables and the topic; a service has fixed ones.
func newRouter(ctx context.Context, pool *pgxpool.Pool, subscriber message.Subscriber, d *demo) (*message.Router, error) {
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: d.inboxTable})
	if err != nil {
		return nil, err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return nil, err
	}
	if err := store.CheckTable(ctx); err != nil { // refuse to start on a table or a driver that cannot work
		return nil, err
	}
	if err := createInvoices(ctx, pool, d.invoiceTable); err != nil {
		return nil, err
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		return nil, err
	}
	logger := watermill.NewStdLogger(false, false) // the retried and the poisoned failures, to stderr
	poisonQueue, err := middleware.PoisonQueueWithFilter(d.poisoned, d.topic+"_poison", inbox.Poisonous)
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(d.countDeliveries) // not part of the stack: counts deliveries for the table
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
	router.AddConsumerHandler("billing", d.topic, subscriber, d.countRuns(handleOrder(d.invoiceTable)))
	return router, nil
}

// createInvoices creates the table handleOrder writes to. It has no UNIQUE constraint on
// order_id, on purpose: the inbox alone keeps a second invoice out, so counting rows proves it.
func createInvoices(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, "CREATE TABLE "+table+" (order_id text NOT NULL, amount_cents bigint NOT NULL)")
	return err
}

// OrderPlaced is the event on the orders topic, as JSON. Its message's UUID is the order
// ID, so that every copy of one order has the same inbox key.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// handleOrder returns the handler that writes the order's invoice into table through the
// inbox transaction: the invoice and the inbox claim commit or roll back together, and a
// copy of a committed order never gets here.
func handleOrder(table string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		var order OrderPlaced
		if err := json.Unmarshal(msg.Payload, &order); err != nil {
			return fmt.Errorf("decode order %s: %w", msg.UUID, err)
		}
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return errors.New("no inbox transaction: run the handler behind the inbox middleware")
		}
		_, err := tx.Exec(msg.Context(), "INSERT INTO "+table+" (order_id, amount_cents) VALUES ($1, $2)",
			order.OrderID, order.AmountCents)
		return err
	}
}

// envOr returns the environment variable's value, or fallback when it is unset: the
// program finds its services where the repository's tests do.
func envOr(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

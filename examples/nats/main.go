// Command nats runs an order handler behind the inbox on NATS JetStream, with PostgreSQL as
// the database, as a team lays it out: a stream named apart from its dotted subjects (ORDERS
// for orders.>), and three handlers of orders.paid on one durable consumer. It publishes
// orders 1-3 times each and fails unless every order got exactly one invoice (demo.go).
//
//	go run ./examples/nats -nats nats://127.0.0.1:4222
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
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	natsURL := flag.String("nats", envOr("INBOX_TEST_NATS_URL", "nats://127.0.0.1:4222"),
		"NATS URL, JetStream enabled: nats-server -js (default $INBOX_TEST_NATS_URL, or the shown value)")
	postgres := flag.String("postgres", envOr("INBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL (default $INBOX_TEST_POSTGRES_URL, or the shown value)")
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()
	if err := run(context.Background(), *natsURL, *postgres, *orders, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		os.Exit(1)
	}
}

// handlers is how many router handlers consume the orders: the durable consumer shares its
// messages among them, and inbox.Config{Consumer: "billing"} in newRouter makes them one
// inbox consumer, so a copy that reaches another handler is still a duplicate.
const handlers = 3

// run opens the broker and the database, creates the stream, builds the router with the
// inbox and has the demo publish the orders and check the invoices; it removes what it
// created when it ends.
func run(ctx context.Context, natsURL, postgres string, orders int, out io.Writer) (err error) {
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := newDemo(pool)
	defer func() { err = errors.Join(err, d.dropTables(ctx)) }()
	// The run's own ORDERS and orders.paid; the demo publishes to d.topic, newRouter reads it.
	stream, subject := ordersStream(d.topic)
	d.topic = subject
	if err := createStream(ctx, natsURL, stream); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, removeStream(ctx, natsURL, stream.Name)) }()
	subscriber, err := newSubscriber(natsURL, stream.Name, 30*time.Second)
	if err != nil {
		return err
	}
	publisher, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natsURL, Logger: watermill.NopLogger{}})
	if err != nil {
		return err
	}
	defer publisher.Close()
	router, err := newRouter(ctx, pool, subscriber, d)
	if err != nil {
		return err
	}
	for i := 2; i <= handlers; i++ { // newRouter added the first
		router.AddConsumerHandler(fmt.Sprintf("billing_%d", i), d.topic, subscriber, d.countRuns(handleOrder(d.invoiceTable)))
	}
	return d.run(ctx, router, publisher, orders, out)
}

// ordersStream returns the stream that holds the subjects under prefix, and the subject of
// paid orders. A service passes "orders": the stream ORDERS, with the subjects orders.>,
// and the subject orders.paid. A stream's name cannot hold a dot, so it is named apart from
// its subjects, and the publisher publishes to the subject (the topic) as it is. The demo
// passes its topic, orders_<random>, so that no other run shares the stream or the subject.
func ordersStream(prefix string) (jetstream.StreamConfig, string) {
	stream := jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"}}
	return stream, prefix + ".paid"
}

// createStream creates the stream, or updates it to config: a service does it once, at
// deployment or start-up, not in each subscriber, since other subjects share the stream.
func createStream(ctx context.Context, natsURL string, config jetstream.StreamConfig) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, config); err != nil {
		return fmt.Errorf("create stream %s (nats-server -js): %w", config.Name, err)
	}
	return nil
}

// newSubscriber consumes a subject of the stream through the durable consumer "billing".
// Every Subscribe, of this subscriber or of another one, joins that consumer, and all of
// them share its messages. A nack is a NAK, which JetStream redelivers at once; a message
// not acked within ackWait (a consumer that died) is redelivered by JetStream to any
// subscriber of the consumer. ackWait must be longer than the handler takes.
func newSubscriber(natsURL, stream string, ackWait time.Duration) (*wmjetstream.Subscriber, error) {
	return wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{
		URL:                 natsURL,
		Logger:              watermill.NopLogger{},
		AckWaitTimeout:      ackWait,
		ResourceInitializer: durableConsumer(stream, "billing", ackWait),
		// Fetch one message at a time: JetStream's ack clock runs from delivery, so the
		// messages of a large buffer could time out behind a slow one and be redelivered.
		ConsumeOptions: []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(1)},
	})
}

// durableConsumer creates, or finds, the durable pull consumer name on the stream, which
// takes the subject the router subscribes to (the topic). Unlike the plugin's ephemeral
// default, the consumer outlives the subscriber, so what a stopped subscriber left unacked
// goes to the next one. A durable name is unique in its stream: a handler of another of the
// stream's subjects needs a consumer of another name.
func durableConsumer(stream, name string, ackWait time.Duration) wmjetstream.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		consumer, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:       name,
			FilterSubject: topic,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("create consumer %s on stream %s: %w", name, stream, err)
		}
		return consumer, nil, nil // no cleanup: the consumer stays for the next subscriber
	}
}

// removeStream deletes the stream the run created, and its durable consumer with it.
func removeStream(ctx context.Context, natsURL, stream string) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return js.DeleteStream(context.WithoutCancel(ctx), stream)
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

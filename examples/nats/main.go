// Command nats runs an order handler behind the inbox on NATS JetStream, with PostgreSQL as
// the database. It publishes orders 1-3 times each and fails unless every order got exactly
// one invoice (demo.go).
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
	"os"
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

// run opens the broker and the database, builds the router with the inbox, and has the
// demo publish the orders and check the invoices; it removes what it created when it ends.
func run(ctx context.Context, natsURL, postgres string, orders int, out io.Writer) (err error) {
	subscriber, err := newSubscriber(natsURL, 30*time.Second)
	if err != nil {
		return err
	}
	publisher, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natsURL, Logger: watermill.NopLogger{}})
	if err != nil {
		return err
	}
	defer publisher.Close()
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := newDemo(pool)
	defer func() { err = errors.Join(err, d.dropTables(ctx), removeStream(ctx, natsURL, d.topic)) }()
	router, err := newRouter(ctx, pool, subscriber, d)
	if err != nil {
		return err
	}
	return d.run(ctx, router, publisher, orders, out)
}

// newSubscriber consumes the topic's stream through the durable consumer "billing". All
// subscribers of that consumer share its messages. A nack is a NAK, which JetStream
// redelivers at once; a message not acked within ackWait (a consumer that died) is
// redelivered by JetStream to any subscriber of the consumer. ackWait must be longer than
// the handler takes.
func newSubscriber(natsURL string, ackWait time.Duration) (*wmjetstream.Subscriber, error) {
	return wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{
		URL:                 natsURL,
		Logger:              watermill.NopLogger{},
		AckWaitTimeout:      ackWait,
		ResourceInitializer: durableConsumer("billing", ackWait),
		// Fetch one message at a time: JetStream's ack clock runs from delivery, so the
		// messages of a large buffer could time out behind a slow one and be redelivered.
		ConsumeOptions: []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(1)},
	})
}

// durableConsumer creates the stream (named after the topic) and a durable pull consumer.
// Unlike the plugin's ephemeral default, the consumer outlives the subscriber, so what a
// stopped subscriber left unacked goes to the next one.
func durableConsumer(name string, ackWait time.Duration) wmjetstream.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}})
		if err != nil {
			return nil, nil, fmt.Errorf("create stream %s: %w", topic, err)
		}
		consumer, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:   name,
			AckPolicy: jetstream.AckExplicitPolicy,
			AckWait:   ackWait,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("create consumer %s: %w", name, err)
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
	if err := createInvoices(ctx, pool, d.invoiceTable); err != nil {
		return nil, err
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		return nil, err
	}
	poisonQueue, err := middleware.PoisonQueue(d.poisoned, d.topic+"_poison")
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(d.countDeliveries) // not part of the stack: counts deliveries for the table
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}
	router.AddMiddleware(
		poisonQueue,                        // outermost: takes what every retry failed
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

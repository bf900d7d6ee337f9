// Command anybroker runs the same router, inbox and order handler on any of the brokers the
// examples cover; only the -broker flag (or INBOX_BROKER) changes. Swapping brokers needs no
// change to the handler or the inbox: the idempotency comes from the database. It publishes
// orders 1-3 times each and fails unless every order got exactly one invoice (demo.go).
//
//	go run ./examples/anybroker -broker redisstream
//	INBOX_BROKER=kafka go run ./examples/anybroker
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

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// config is where everything is; only Broker picks between them.
type config struct {
	Broker   string
	Topic    string // "": the demo's orders_<random>
	Orders   int
	Postgres string
	Kafka    string // comma-separated brokers
	AMQP     string
	NATS     string
	Redis    string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Broker, "broker", envOr("INBOX_BROKER", "gochannel"), "one of "+strings.Join(brokerNames(), ", ")+" (env INBOX_BROKER)")
	flag.StringVar(&cfg.Topic, "topic", "", "topic to publish to and consume from (default: orders_<random>, new each run)")
	flag.IntVar(&cfg.Orders, "orders", 200, "distinct orders to publish, each 1-3 times")
	flag.StringVar(&cfg.Postgres, "postgres", envOr("INBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL: the inbox, the invoices, and the sql broker (default $INBOX_TEST_POSTGRES_URL, or the shown value)")
	flag.StringVar(&cfg.Kafka, "kafka", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	flag.StringVar(&cfg.AMQP, "amqp", envOr("INBOX_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		"RabbitMQ URL (default $INBOX_TEST_AMQP_URL, or the shown value)")
	flag.StringVar(&cfg.NATS, "nats", envOr("INBOX_TEST_NATS_URL", "nats://127.0.0.1:4222"),
		"NATS URL, JetStream enabled (default $INBOX_TEST_NATS_URL, or the shown value)")
	flag.StringVar(&cfg.Redis, "redis", envOr("INBOX_TEST_REDIS_ADDR", "127.0.0.1:6379"),
		"Redis address (default $INBOX_TEST_REDIS_ADDR, or the shown value)")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "anybroker (%s): %v\n", cfg.Broker, err)
		os.Exit(1)
	}
}

// run is the same for every broker: open it, then hand it to the one router setup.
func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	b, ok := brokerNamed(cfg.Broker)
	if !ok {
		return fmt.Errorf("unknown broker %q: use one of %s", cfg.Broker, strings.Join(brokerNames(), ", "))
	}
	publisher, subscriber, closeBroker, err := b.open(ctx, cfg)
	if closeBroker != nil {
		defer closeBroker()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "broker: %s\n", cfg.Broker)
	pool, err := pgxpool.New(ctx, cfg.Postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := newDemo(pool)
	if cfg.Topic != "" {
		d.topic = cfg.Topic
	}
	defer func() { err = errors.Join(err, d.dropTables(ctx)) }()
	router, err := newRouter(ctx, pool, subscriber, d)
	if err != nil {
		return err
	}
	err = d.run(ctx, router, publisher, cfg.Orders, out)
	if b.leaves != "" {
		fmt.Fprintf(out, "left in place: %s\n", b.leaves)
	}
	return err
}

// broker is a value of -broker: how to open it, configured as in that broker's own example
// (examples/<broker>), and what a run leaves on it: the topic's queue, stream or tables,
// drained, under a name no other run uses (examples/<broker> removes them; this program
// stays minimal).
type broker struct {
	name   string
	open   func(ctx context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error)
	leaves string
}

var brokers = []broker{
	{"gochannel", openGoChannel, ""},
	{"kafka", openKafka, "the Kafka topic and the offsets of the consumer group billing"},
	{"amqp", openAMQP, "the durable RabbitMQ queue of the topic, drained"},
	{"nats", openNATS, "the JetStream stream and durable consumer of the topic, drained"},
	{"redisstream", openRedisStream, "the Redis stream of the topic and its consumer group, drained"},
	{"sql", openSQL, "the watermill-sql tables of the topic in PostgreSQL, drained"},
}

func brokerNamed(name string) (broker, bool) {
	for _, b := range brokers {
		if b.name == name {
			return b, true
		}
	}
	return broker{}, false
}

func brokerNames() []string {
	names := make([]string, len(brokers))
	for i, b := range brokers {
		names[i] = b.name
	}
	return names
}

// Each open function returns the broker's publisher and subscriber, and a function that
// releases what the router does not close (it closes the subscriber).

func openGoChannel(context.Context, config) (message.Publisher, message.Subscriber, func(), error) {
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	return pubSub, pubSub, func() { pubSub.Close() }, nil
}

func openKafka(_ context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	addrs := strings.Split(cfg.Kafka, ",")
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: addrs, Marshaler: kafka.DefaultMarshaler{}}, watermill.NopLogger{})
	if err != nil {
		return nil, nil, nil, err
	}
	saramaConfig := kafka.DefaultSaramaSubscriberConfig()
	saramaConfig.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: addrs, Unmarshaler: kafka.DefaultMarshaler{}, ConsumerGroup: "billing", OverwriteSaramaConfig: saramaConfig,
	}, watermill.NopLogger{})
	return pub, sub, func() { pub.Close() }, err
}

func openAMQP(_ context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	pub, err := amqp.NewPublisher(amqp.NewDurableQueueConfig(cfg.AMQP), watermill.NopLogger{})
	if err != nil {
		return nil, nil, nil, err
	}
	sub, err := amqp.NewSubscriber(amqp.NewDurableQueueConfig(cfg.AMQP), watermill.NopLogger{})
	return pub, sub, func() { pub.Close() }, err
}

func openNATS(_ context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	pub, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: cfg.NATS, Logger: watermill.NopLogger{}})
	if err != nil {
		return nil, nil, nil, err
	}
	const ackWait = 30 * time.Second
	sub, err := wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{
		URL: cfg.NATS, Logger: watermill.NopLogger{}, AckWaitTimeout: ackWait,
		ResourceInitializer: func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
			stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}})
			if err != nil {
				return nil, nil, err
			}
			consumer, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
				Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
			})
			return consumer, nil, err
		},
		ConsumeOptions: []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(1)},
	})
	return pub, sub, func() { pub.Close() }, err
}

func openRedisStream(_ context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redis.NewClient(&redis.Options{Addr: cfg.Redis})}, watermill.NopLogger{})
	if err != nil {
		return nil, nil, nil, err
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: redis.NewClient(&redis.Options{Addr: cfg.Redis}), ConsumerGroup: "billing",
		ClaimInterval: time.Second, MaxIdleTime: 5 * time.Second,
	}, watermill.NopLogger{})
	return pub, sub, func() { pub.Close() }, err
}

func openSQL(ctx context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	pool, err := pgxpool.New(ctx, cfg.Postgres)
	if err != nil {
		return nil, nil, nil, err
	}
	db := wmsql.BeginnerFromPgx(pool)
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup: "billing", SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true, PollInterval: 100 * time.Millisecond, ResendInterval: 10 * time.Millisecond,
	}, watermill.NopLogger{})
	return pub, sub, pool.Close, err
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

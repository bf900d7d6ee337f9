// Command anybroker runs the same router, inbox and billing handler on any of the brokers
// the examples cover; only the -broker flag (or INBOX_BROKER) changes. Swapping brokers
// needs no change to the handler or the inbox: the idempotency comes from the database.
//
//	go run ./examples/anybroker -broker redisstream
//	INBOX_BROKER=kafka go run ./examples/anybroker
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

// Brokers lists the values -broker accepts.
var Brokers = []string{"gochannel", "kafka", "amqp", "nats", "redisstream", "sql"}

// config is where everything is; only Broker picks between them.
type config struct {
	Broker   string
	Topic    string
	Orders   int
	Postgres string
	Kafka    string // comma-separated brokers
	AMQP     string
	NATS     string
	Redis    string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Broker, "broker", envOr("INBOX_BROKER", "gochannel"), "one of "+strings.Join(Brokers, ", ")+" (env INBOX_BROKER)")
	flag.StringVar(&cfg.Topic, "topic", "", "topic to publish to and consume from (default: orders_<random>, new each run)")
	flag.IntVar(&cfg.Orders, "orders", 200, "distinct orders to publish, each 1-3 times")
	flag.StringVar(&cfg.Postgres, "postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL: the inbox, the invoices, and the sql broker", "INBOX_TEST_POSTGRES_URL"))
	flag.StringVar(&cfg.Kafka, "kafka", demo.DefaultKafkaBrokers, "Kafka brokers, comma-separated")
	flag.StringVar(&cfg.AMQP, "amqp", demo.AMQPURL, demo.FlagHelp("RabbitMQ URL", "INBOX_TEST_AMQP_URL"))
	flag.StringVar(&cfg.NATS, "nats", demo.NATSURL, demo.FlagHelp("NATS URL (JetStream enabled)", "INBOX_TEST_NATS_URL"))
	flag.StringVar(&cfg.Redis, "redis", demo.RedisAddr, demo.FlagHelp("Redis address", "INBOX_TEST_REDIS_ADDR"))
	flag.Parse()

	if cfg.Topic == "" {
		cfg.Topic = demo.Topic()
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "anybroker (%s): %v\n", cfg.Broker, err)
		os.Exit(1)
	}
}

// run is the same for every broker: open it, then hand it to the one router setup.
func run(ctx context.Context, cfg config, out io.Writer) error {
	pub, sub, closeBroker, err := open(ctx, cfg)
	if closeBroker != nil {
		defer closeBroker()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "broker: %s\n", cfg.Broker)
	return demo.Run(ctx, demo.Options{
		PostgresURL: cfg.Postgres,
		Topic:       cfg.Topic,
		Orders:      cfg.Orders,
		Publisher:   pub,
		Subscriber:  sub,
		Out:         out,
		Leaves:      leaves[cfg.Broker],
	})
}

// leaves is what a run leaves on each broker: the topic's queue, stream or tables, drained,
// under a name no other run uses (examples/<broker> removes them; this program stays
// minimal).
var leaves = map[string]string{
	"kafka":       "the Kafka topic and the offsets of the consumer group billing",
	"amqp":        "the durable RabbitMQ queue of the topic, drained",
	"nats":        "the JetStream stream and durable consumer of the topic, drained",
	"redisstream": "the Redis stream of the topic and its consumer group, drained",
	"sql":         "the watermill-sql tables of the topic in PostgreSQL, drained",
}

// open builds the broker's publisher and subscriber, configured as in that broker's own
// example (examples/<broker>), and a function that releases what the router does not close.
func open(ctx context.Context, cfg config) (message.Publisher, message.Subscriber, func(), error) {
	logger := watermill.NopLogger{}
	switch cfg.Broker {
	case "gochannel":
		pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
		return pubSub, pubSub, func() { pubSub.Close() }, nil

	case "kafka":
		brokers := strings.Split(cfg.Kafka, ",")
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}}, logger)
		if err != nil {
			return nil, nil, nil, err
		}
		saramaConfig := kafka.DefaultSaramaSubscriberConfig()
		saramaConfig.Consumer.Offsets.Initial = sarama.OffsetOldest
		sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
			Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{}, ConsumerGroup: "billing", OverwriteSaramaConfig: saramaConfig,
		}, logger)
		return pub, sub, func() { pub.Close() }, err

	case "amqp":
		pub, err := amqp.NewPublisher(amqp.NewDurableQueueConfig(cfg.AMQP), logger)
		if err != nil {
			return nil, nil, nil, err
		}
		sub, err := amqp.NewSubscriber(amqp.NewDurableQueueConfig(cfg.AMQP), logger)
		return pub, sub, func() { pub.Close() }, err

	case "nats":
		pub, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: cfg.NATS, Logger: logger})
		if err != nil {
			return nil, nil, nil, err
		}
		const ackWait = 30 * time.Second
		sub, err := wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{
			URL: cfg.NATS, Logger: logger, AckWaitTimeout: ackWait,
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

	case "redisstream":
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redis.NewClient(&redis.Options{Addr: cfg.Redis})}, logger)
		if err != nil {
			return nil, nil, nil, err
		}
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client: redis.NewClient(&redis.Options{Addr: cfg.Redis}), ConsumerGroup: "billing",
			ClaimInterval: time.Second, MaxIdleTime: 5 * time.Second,
		}, logger)
		return pub, sub, func() { pub.Close() }, err

	case "sql":
		pool, err := pgxpool.New(ctx, cfg.Postgres)
		if err != nil {
			return nil, nil, nil, err
		}
		db := wmsql.BeginnerFromPgx(pool)
		pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, logger)
		if err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
			ConsumerGroup: "billing", SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true, PollInterval: 100 * time.Millisecond, ResendInterval: 10 * time.Millisecond,
		}, logger)
		return pub, sub, pool.Close, err
	}
	return nil, nil, nil, fmt.Errorf("unknown broker %q: use one of %s", cfg.Broker, strings.Join(Brokers, ", "))
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

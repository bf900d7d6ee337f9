// Command nats runs the billing handler behind the inbox on NATS JetStream.
//
//	go run ./examples/nats -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

func main() {
	natsURL := flag.String("nats", demo.NATSURL, demo.FlagHelp("NATS URL (JetStream enabled: nats-server -js)", "INBOX_TEST_NATS_URL"))
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(*natsURL, *postgres, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		os.Exit(1)
	}
}

func run(natsURL, postgres string, orders int) error {
	subscriber, err := newSubscriber(natsURL, 30*time.Second)
	if err != nil {
		return err
	}
	publisher, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natsURL, Logger: watermill.NopLogger{}})
	if err != nil {
		return err
	}
	defer publisher.Close()
	topic := demo.Topic()
	return demo.Run(context.Background(), demo.Options{
		PostgresURL: postgres,
		Topic:       topic,
		Orders:      orders,
		Publisher:   publisher,
		Subscriber:  subscriber,
		Out:         os.Stdout,
		Remove:      func(ctx context.Context) error { return removeStream(ctx, natsURL, topic) },
	})
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
	return js.DeleteStream(ctx, stream)
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

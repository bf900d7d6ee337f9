// Command kafka runs the billing handler behind the inbox on Kafka, as a consumer group.
//
//	go run ./examples/kafka -kafka 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

func main() {
	brokers := flag.String("kafka", demo.DefaultKafkaBrokers, "Kafka brokers, comma-separated")
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(strings.Split(*brokers, ","), *postgres, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func run(brokers []string, postgres string, orders int) error {
	publisher, err := newPublisher(brokers)
	if err != nil {
		return err
	}
	defer publisher.Close()
	subscriber, err := newSubscriber(brokers)
	if err != nil {
		return err
	}
	topic := demo.Topic()
	return demo.Run(context.Background(), demo.Options{
		PostgresURL: postgres,
		Topic:       topic,
		Orders:      orders,
		Publisher:   publisher,
		Subscriber:  subscriber,
		Out:         os.Stdout,
		// The topic the broker created on first use; the consumer group's offsets of a
		// deleted topic go with it.
		Remove: func(context.Context) error {
			admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
			if err != nil {
				return err
			}
			defer admin.Close()
			return admin.DeleteTopic(topic)
		},
	})
}

// newPublisher sends each message as a record whose header _watermill_message_uuid holds
// the UUID: the inbox key.
func newPublisher(brokers []string) (*kafka.Publisher, error) {
	return kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:   brokers,
		Marshaler: kafka.DefaultMarshaler{},
	}, watermill.NopLogger{})
}

// newSubscriber joins the consumer group "billing". The partitions are shared among the
// group's members and each is consumed in order, one record at a time; a nack is handed to
// the handler again after NackResendSleep, in this process. Kafka itself redelivers what a
// member had not committed when it left or died: the member that takes over its partitions
// starts from the last committed offset.
func newSubscriber(brokers []string) (*kafka.Subscriber, error) {
	config := kafka.DefaultSaramaSubscriberConfig()
	// A new group starts at the beginning of the topic, so that what was published before
	// the group joined is consumed too.
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	return kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		ConsumerGroup:         "billing",
		OverwriteSaramaConfig: config,
	}, watermill.NopLogger{})
}

// Command amqp runs the billing handler behind the inbox on RabbitMQ.
//
//	go run ./examples/amqp -amqp amqp://guest:guest@127.0.0.1:5672/
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

func main() {
	amqpURL := flag.String("amqp", demo.AMQPURL, demo.FlagHelp("RabbitMQ URL", "INBOX_TEST_AMQP_URL"))
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(*amqpURL, *postgres, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "amqp:", err)
		os.Exit(1)
	}
}

func run(amqpURL, postgres string, orders int) error {
	publisher, err := amqp.NewPublisher(config(amqpURL), watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer publisher.Close()
	subscriber, err := amqp.NewSubscriber(config(amqpURL), watermill.NopLogger{})
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
		Remove:      func(context.Context) error { return removeQueue(amqpURL, topic) },
	})
}

// removeQueue deletes the durable queue the run declared.
func removeQueue(amqpURL, queue string) error {
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDelete(queue, false, false, false)
	return err
}

// config is a durable queue named after the topic. Subscribers of one queue compete for its
// messages. RabbitMQ puts a message back in the queue when it is nacked, and when the
// channel of a consumer that has not acked it closes.
func config(amqpURL string) amqp.Config {
	return amqp.NewDurableQueueConfig(amqpURL)
}

package main

import (
	"bytes"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestAMQP: three competing consumers on one durable queue; nacks are requeued by RabbitMQ,
// and the first consumers close their channels with unacked messages, which RabbitMQ
// delivers again to the consumers that replace them.
func TestAMQP(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	pool := e2e.Pool(t)
	queue := testenv.Name("orders")
	t.Cleanup(func() { deleteQueue(t, amqpURL, queue) })

	publisher, err := amqp.NewPublisher(config(amqpURL), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })

	e2e.Run(t, pool, e2e.Scenario{
		Topic:     queue,
		Publisher: publisher,
		NewSubscriber: func(t *testing.T) message.Subscriber {
			sub, err := amqp.NewSubscriber(config(amqpURL), watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			return sub
		},
		Workers: 3,
		Crashes: 2,
	})
}

func deleteQueue(t *testing.T, amqpURL, queue string) {
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Errorf("delete queue %s: %v", queue, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete queue %s: %v", queue, err)
		return
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Errorf("delete queue %s: %v", queue, err)
	}
}

// TestAMQPProgram runs the program as .ci/run does, with few orders: its own handler, behind the
// recommended stack, writes one invoice per order (run fails otherwise, or if it cannot
// remove what it created).
func TestAMQPProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.AMQPURL(t), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

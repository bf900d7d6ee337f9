package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/examples/kafkakey"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// There is no Kafka broker on the test machines: the tests run franz-go's kfake, an
// in-process Kafka cluster that speaks the protocol Sarama speaks.
func startKafka(t *testing.T, topic string) []string {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return cluster.ListenAddrs()
}

// TestKafkaProgram runs the program, as go run ./examples/kafka does, on a cluster that
// creates the program's topic on first use: one invoice per order, through the program's
// own handler and stack.
func TestKafkaProgram(t *testing.T) {
	t.Parallel()
	postgres := testenv.PostgresURL(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	var out bytes.Buffer
	if err := run(t.Context(), cluster.ListenAddrs(), postgres, 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

// TestKafka: one consumer group member on four partitions, so copies of an order on
// different partitions race. A nack is resent by the subscriber; the member that replaces
// the first one gets again, from Kafka, every record the first had not committed.
func TestKafka(t *testing.T) {
	t.Parallel()
	pool := e2e.Pool(t)
	topic := testenv.Name("orders")
	brokers := startKafka(t, topic)

	publisher, err := newPublisher(brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })
	e2e.Run(t, pool, e2e.Scenario{
		Topic:         topic,
		Publisher:     publisher,
		NewSubscriber: kafkaSubscriber(brokers),
		Crashes:       2,
	})
}

// TestKafkaOffsetKey: records from a producer outside Watermill (no UUID header), keyed by
// kafkakey.OffsetKey. The records the first member never committed come back at the same
// offsets, so with the same keys, and are skipped. Each order is sent once: the offset key
// cannot tell a producer's second send of an order from a new order.
func TestKafkaOffsetKey(t *testing.T) {
	t.Parallel()
	pool := e2e.Pool(t)
	topic := testenv.Name("orders")
	brokers := startKafka(t, topic)

	publisher := noUUIDPublisher(t, brokers)
	e2e.Run(t, pool, e2e.Scenario{
		Topic:         topic,
		Publisher:     publisher,
		NewSubscriber: kafkaSubscriber(brokers),
		Key:           kafkakey.OffsetKey,
		MaxCopies:     1,
		Crashes:       2,
	})
}

// TestKafkaWithoutUUID: with the default key, a record without a UUID is never processed
// and never skipped: the inbox fails it with inbox.ErrInvalidKey, so it is nacked (and resent)
// and no invoice is written.
func TestKafkaWithoutUUID(t *testing.T) {
	t.Parallel()
	pool := e2e.Pool(t)
	topic := testenv.Name("orders")
	brokers := startKafka(t, topic)
	invoices, inboxMiddleware := newInbox(t, pool)

	failures := newKeyFailures()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	sub := kafkaSubscriber(brokers)(t)
	router.AddConsumerHandler("billing", topic, sub, failures.handler(invoices.Handle)).
		AddMiddleware(failures.observe, inboxMiddleware)
	go func() { _ = router.Run(context.WithoutCancel(t.Context())) }()
	t.Cleanup(func() { _ = router.Close() })
	<-router.Running()

	msg, err := billing.NewOrderMessage(billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := noUUIDPublisher(t, brokers).Publish(topic, msg); err != nil {
		t.Fatal(err)
	}

	// The record fails, is nacked, comes back and fails again.
	for range 2 {
		select {
		case <-failures.emptyKey:
		case <-time.After(60 * time.Second):
			t.Fatal("the record without a UUID did not fail twice with inbox.ErrInvalidKey in 60s")
		}
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	failures.mu.Lock()
	defer failures.mu.Unlock()
	if failures.runs != 0 || failures.otherErrs != 0 {
		t.Errorf("handler ran %d times, %d other errors; want 0 and 0", failures.runs, failures.otherErrs)
	}
	counts, err := invoices.Count(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Invoices != 0 {
		t.Errorf("%d invoices, want 0", counts.Invoices)
	}
	t.Logf("a record without a UUID failed %d times with inbox.ErrInvalidKey and wrote nothing", failures.emptyKeyErrs)
}

// newInbox creates an invoice table and an inbox table, dropped when the test ends, and
// returns the invoice handler and the inbox middleware.
func newInbox(t *testing.T, pool *pgxpool.Pool) (*e2e.Invoices, message.HandlerMiddleware) {
	t.Helper()
	invoiceTable, inboxTable := testenv.Name("invoices"), testenv.Name("inbox")
	e2e.DropTable(t, pool, invoiceTable)
	e2e.DropTable(t, pool, inboxTable)
	invoices, err := e2e.NewInvoices(invoiceTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := invoices.CreateTable(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(t.Context()); err != nil {
		t.Fatal(err)
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return invoices, inboxMiddleware
}

// keyFailures counts, around the inbox, the deliveries that fail with inbox.ErrInvalidKey
// (and signals each on emptyKey) and those that fail otherwise, and inside it the handler's
// runs.
type keyFailures struct {
	emptyKey chan struct{}

	mu                      sync.Mutex
	emptyKeyErrs, otherErrs int
	runs                    int
}

func newKeyFailures() *keyFailures { return &keyFailures{emptyKey: make(chan struct{}, 100)} }

func (k *keyFailures) observe(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		k.mu.Lock()
		defer k.mu.Unlock()
		switch {
		case errors.Is(err, inbox.ErrInvalidKey):
			k.emptyKeyErrs++
			select {
			case k.emptyKey <- struct{}{}:
			default:
			}
		case err != nil:
			k.otherErrs++
		}
		return out, err
	}
}

func (k *keyFailures) handler(h func(*message.Message) error) func(*message.Message) error {
	return func(msg *message.Message) error {
		k.mu.Lock()
		k.runs++
		k.mu.Unlock()
		return h(msg)
	}
}

// kafkaSubscriber builds the example's subscriber, tuned for kfake.
func kafkaSubscriber(brokers []string) func(t *testing.T) message.Subscriber {
	return func(t *testing.T) message.Subscriber {
		sub, err := newSubscriber(brokers)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
}

// noUUIDPublisher publishes like a producer outside Watermill: the payload only, no
// _watermill_message_uuid header.
func noUUIDPublisher(t *testing.T, brokers []string) message.Publisher {
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: payloadOnly{}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

type payloadOnly struct{}

func (payloadOnly) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	if len(msg.Payload) == 0 {
		return nil, fmt.Errorf("empty payload")
	}
	return &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(msg.Payload)}, nil
}

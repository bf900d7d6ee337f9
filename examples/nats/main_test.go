package main

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestNATSJetStream: three subscribers share one durable consumer; a nack is a NAK that
// JetStream redelivers, and the messages whose acks are dropped are redelivered by
// JetStream once their ack wait runs out.
//
// watermill-nats v2.1.3's jetstream subscriber closes its output channel (consumer.go:158,
// in monitor) without waiting for the consumer callbacks that send on it
// (message_handler.go:52, in handleMsg): a message that arrives while a subscriber closes
// is a send racing the close, which -race reports (and which could panic). So no
// subscriber closes while JetStream may still deliver: the subscribers are not restarted
// mid-run (the ack timeout is the redelivery a dead consumer gets anyway), and the router
// closes only once the durable consumer has nothing pending and nothing awaiting an ack,
// and every delivery JetStream made has come out of a subscriber. Without that wait, extra
// copies of committed orders, and redeliveries of deliveries that outlived the 2 s ack wait
// on a loaded machine, could arrive during the close. The last count is for a redelivery
// sent just before the delivery it repeats was acked: JetStream then counts nothing
// pending, yet the redelivery is still on its way to a subscriber.
func TestNATSJetStream(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	pool := e2e.Pool(t)
	stream := testenv.Name("orders")

	// The stream exists before anything is published to it (the subscribers create it too).
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: stream, Subjects: []string{stream}}); err != nil {
		t.Fatalf("JetStream (nats-server -js): %v", err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(context.WithoutCancel(t.Context()), stream); err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})

	// received counts the deliveries that came out of the subscribers (countingSubscriber).
	var received atomic.Uint64
	publisher, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natsURL, Logger: watermill.NopLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })

	e2e.Run(t, pool, e2e.Scenario{
		Topic:     stream,
		Publisher: publisher,
		NewSubscriber: func(t *testing.T) message.Subscriber {
			sub, err := newSubscriber(natsURL, 2*time.Second) // redeliver a dead subscriber's messages soon
			if err != nil {
				t.Fatal(err)
			}
			return countingSubscriber{sub, &received}
		},
		Workers:   3,
		Crashes:   2,
		NoRestart: true,
		Drained: func(t *testing.T) bool {
			consumer, err := js.Consumer(t.Context(), stream, "billing")
			if err != nil {
				t.Fatalf("durable consumer: %v", err)
			}
			info, err := consumer.Info(t.Context())
			if err != nil {
				t.Fatalf("durable consumer info: %v", err)
			}
			return info.NumPending == 0 && info.NumAckPending == 0 && received.Load() == info.Delivered.Consumer
		},
	})
}

// countingSubscriber counts, in received, the messages its subscriber hands out: one per
// delivery JetStream made to it, redeliveries included.
type countingSubscriber struct {
	message.Subscriber
	received *atomic.Uint64
}

func (s countingSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			s.received.Add(1)
			select {
			case out <- msg:
			case <-ctx.Done():
				return // the router stopped; JetStream redelivers what was not acked
			}
		}
	}()
	return out, nil
}

// TestNATSProgram runs the program as .ci/run does, with few orders: its own handler, behind the
// recommended stack, writes one invoice per order (run fails otherwise, or if it cannot
// remove what it created).
func TestNATSProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.NATSURL(t), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

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

// TestNATSJetStream runs the scenario as a team runs NATS: the stream ORDERS_<random>,
// named apart from its dotted subjects, and three subscribers of the subject
// orders_<random>.paid on one durable consumer. A nack is a NAK that JetStream redelivers,
// and the messages whose acks are dropped are redelivered by JetStream once their ack wait
// runs out.
//
// No subscriber closes while JetStream may still deliver, because of watermill-nats'
// close race (README.md): the subscribers are not restarted mid-run (the ack timeout is the
// redelivery a dead consumer gets anyway), and the router closes only once the durable
// consumer has nothing pending and nothing awaiting an ack, and every delivery JetStream made
// has come out of a subscriber. Without that wait, extra copies of committed orders, and
// redeliveries of deliveries that outlived the 2 s ack wait on a loaded machine, could arrive
// during the close. The last count is for a redelivery sent just before the delivery it
// repeats was acked: JetStream then counts nothing pending, yet the redelivery is still on
// its way to a subscriber.
func TestNATSJetStream(t *testing.T) {
	natsURL := testenv.NATSURL(t)
	pool := e2e.Pool(t)
	stream, subject := ordersStream(testenv.Name("orders"))

	// The stream exists before anything is published to it, as a service's does.
	if err := createStream(t.Context(), natsURL, stream); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeStream(t.Context(), natsURL, stream.Name); err != nil {
			t.Errorf("delete stream %s: %v", stream.Name, err)
		}
	})
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// received counts the deliveries that came out of the subscribers (countingSubscriber).
	var received atomic.Uint64
	t.Cleanup(func() {
		if t.Failed() {
			logConsumer(t, js, stream.Name, received.Load())
		}
	})
	publisher, err := wmjetstream.NewPublisher(wmjetstream.PublisherConfig{URL: natsURL, Logger: watermill.NopLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })

	report := e2e.Run(t, pool, e2e.Scenario{
		Topic:     subject,
		Publisher: publisher,
		NewSubscriber: func(t *testing.T) message.Subscriber {
			sub, err := newSubscriber(natsURL, stream.Name, 2*time.Second) // redeliver a dead subscriber's messages soon
			if err != nil {
				t.Fatal(err)
			}
			return countingSubscriber{sub, &received}
		},
		Workers:   3,
		Crashes:   2,
		NoRestart: true,
		Drained:   consumerDrained(js, stream.Name, &received),
	})
	// What was published to the dotted subject is in the stream named apart, once each.
	info, err := js.Stream(t.Context(), stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	if state := info.CachedInfo().State; state.Msgs != uint64(report.Published) {
		t.Errorf("stream %s holds %d messages; %d were published to %s", stream.Name, state.Msgs, report.Published, subject)
	}
}

// consumerDrained reports whether the durable consumer billing of stream has nothing pending
// and nothing awaiting an ack, and received counts every delivery it made: JetStream has
// nothing left to deliver to its subscribers, and nothing is on its way to one.
func consumerDrained(js jetstream.JetStream, stream string, received *atomic.Uint64) func(*testing.T) bool {
	return func(t *testing.T) bool {
		consumer, err := js.Consumer(t.Context(), stream, "billing")
		if err != nil {
			t.Fatalf("durable consumer: %v", err)
		}
		info, err := consumer.Info(t.Context())
		if err != nil {
			t.Fatalf("durable consumer info: %v", err)
		}
		return info.NumPending == 0 && info.NumAckPending == 0 && received.Load() == info.Delivered.Consumer
	}
}

// logConsumer logs what JetStream says of the durable consumer billing of stream, for a run
// that failed: what it still holds back, what waits for an ack, the pull requests it has, and
// how many deliveries it made against the received that came out of the subscribers.
func logConsumer(t *testing.T, js jetstream.JetStream, stream string, received uint64) {
	ctx := context.WithoutCancel(t.Context())
	consumer, err := js.Consumer(ctx, stream, "billing")
	if err != nil {
		t.Logf("durable consumer: %v", err)
		return
	}
	info, err := consumer.Info(ctx)
	if err != nil {
		t.Logf("durable consumer info: %v", err)
		return
	}
	t.Logf("consumer billing: pending %d, awaiting an ack %d, redelivered %d, pull requests waiting %d, delivered %d (stream sequence %d), acked up to %d; %d deliveries came out of the subscribers",
		info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting, info.Delivered.Consumer, info.Delivered.Stream, info.AckFloor.Stream, received)
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

package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

// InvoiceCreated is the event the billing handler publishes through a cqrs EventBus.
type InvoiceCreated struct{ OrderID string }

// A handler that publishes through an inbox.Publisher, on every store and in both modes:
// a cqrs EventBus and a plain Publish call from the handler, a third of the runs failing
// after they published, and a publisher that fails its first publishes. Every order gets
// one invoice, and each of its two messages leaves under one UUID, however often it is
// published: nothing a failed run published ever leaves.
func TestPublisherOnEveryStore(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		t.Run(map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) { testPublisher(t, b, writeBehind) })
		})
	}
}

func testPublisher(t *testing.T, b *backend, writeBehind bool) {
	const orders, publishFailures = 30, 10
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 256}, logger)
	t.Cleanup(func() { pubSub.Close() })
	events, err := pubSub.Subscribe(context.Background(), "events")
	if err != nil {
		t.Fatal(err)
	}
	audits, err := pubSub.Subscribe(context.Background(), "audit")
	if err != nil {
		t.Fatal(err)
	}
	failing := &failingPublisher{Publisher: pubSub}
	failing.failuresLeft.Store(publishFailures)
	pub, err := inbox.NewPublisher(failing)
	if err != nil {
		t.Fatal(err)
	}
	marshaler := cqrs.JSONMarshaler{}
	bus, err := cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(cqrs.GenerateEventPublishTopicParams) (string, error) { return "events", nil },
		Marshaler:            marshaler,
	})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", Publisher: pub, WriteBehind: writeBehind}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(mw)
	var mu sync.Mutex
	runs := map[string]int{}
	errAfterPublishing := errors.New("failed after publishing")
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	router.AddConsumerHandler("billing", "orders", pubSub, func(msg *message.Message) error {
		ctx := msg.Context()
		if writeBehind {
			if err := inbox.ExecAtCommit(ctx, b.placeholders(insert), "billing", msg.UUID); err != nil {
				return err
			}
		} else {
			tx, ok := b.inTx(ctx)
			if !ok {
				return errors.New("no inbox transaction")
			}
			if err := tx.exec(ctx, insert, "billing", msg.UUID); err != nil {
				return err
			}
		}
		if err := bus.Publish(ctx, &InvoiceCreated{OrderID: msg.UUID}); err != nil {
			return err
		}
		audit := message.NewMessage(watermill.NewUUID(), []byte(msg.UUID))
		audit.SetContext(ctx)
		if err := pub.Publish("audit", audit); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		runs[msg.UUID]++
		if runs[msg.UUID] == 1 && len(runs)%3 == 0 {
			return errAfterPublishing
		}
		return nil
	})
	runRouter(t, router)

	keys := map[string]bool{}
	for range orders {
		key := watermill.NewUUID()
		keys[key] = true
		if err := pubSub.Publish("orders", message.NewMessage(key, []byte(`{}`))); err != nil {
			t.Fatal(err)
		}
	}

	// UUIDs published per order, for each topic.
	eventUUIDs, auditUUIDs := map[string]map[string]bool{}, map[string]map[string]bool{}
	add := func(m map[string]map[string]bool, order, uuid string) {
		if m[order] == nil {
			m[order] = map[string]bool{}
		}
		m[order][uuid] = true
	}
	deadline := time.After(60 * time.Second)
	for len(eventUUIDs) < orders || len(auditUUIDs) < orders || b.rows(t, b.table, "") < orders {
		select {
		case msg := <-events:
			var event InvoiceCreated
			if err := marshaler.Unmarshal(msg, &event); err != nil {
				t.Fatal(err)
			}
			add(eventUUIDs, event.OrderID, msg.UUID)
			msg.Ack()
		case msg := <-audits:
			add(auditUUIDs, string(msg.Payload), msg.UUID)
			msg.Ack()
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d events and %d audit messages of %d orders published", len(eventUUIDs), len(auditUUIDs), orders)
		}
	}
	for key := range keys {
		if n := len(eventUUIDs[key]); n != 1 {
			t.Errorf("order %s: events under %d UUIDs, want 1", key, n)
		}
		if n := len(auditUUIDs[key]); n != 1 {
			t.Errorf("order %s: audit messages under %d UUIDs, want 1", key, n)
		}
	}
	wantRows(t, "invoices", b.rows(t, b.business, ""), orders)
	wantRows(t, "claims", b.rows(t, b.table, ""), orders)
	if failing.failed.Load() != publishFailures {
		t.Errorf("%d publishes failed, want %d", failing.failed.Load(), publishFailures)
	}
}

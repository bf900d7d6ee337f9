package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// recordingPublisher keeps what it is asked to publish; failures > 0 fails that many calls.
type recordingPublisher struct {
	mu       sync.Mutex
	failures int
	sent     []sentMessage
}

type sentMessage struct {
	topic, uuid, payload, meta string
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures > 0 {
		p.failures--
		return errors.New("broker unavailable")
	}
	for _, m := range msgs {
		p.sent = append(p.sent, sentMessage{topic, m.UUID, string(m.Payload), fmt.Sprint(map[string]string(m.Metadata))})
	}
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) published() []sentMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sentMessage(nil), p.sent...)
}

func newPublisher(t *testing.T, pub message.Publisher) *inbox.Publisher {
	t.Helper()
	p, err := inbox.NewPublisher(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// publishInvoice publishes one message per delivery from inside the handler, as a cqrs
// handler or a hand-written one does, with a new UUID each run.
func publishInvoice(p message.Publisher, msg *message.Message) error {
	out := message.NewMessage(watermill.NewUUID(), []byte("invoice for "+msg.UUID))
	out.Metadata.Set("order_id", msg.UUID)
	out.SetContext(msg.Context())
	return p.Publish("invoices", out)
}

func TestPublisherPublishesOnlyAfterTheCommit(t *testing.T) {
	store := newFakeStore()
	rec := &recordingPublisher{}
	pub := newPublisher(t, rec)
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		if err := publishInvoice(pub, msg); err != nil {
			return nil, err
		}
		if err := publishInvoice(pub, msg); err != nil {
			return nil, err
		}
		if n := len(rec.published()); n != 0 {
			t.Errorf("%d messages left the process before the commit", n)
		}
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	sent := rec.published()
	if len(sent) != 2 || sent[0].topic != "invoices" || sent[0].uuid == sent[1].uuid {
		t.Fatalf("published %+v, want the handler's two messages, in order", sent)
	}
}

func TestPublisherSendsNothingForAFailedOrPanickedRun(t *testing.T) {
	for _, failure := range []string{"error", "panic"} {
		t.Run(failure, func(t *testing.T) {
			store := newFakeStore()
			rec := &recordingPublisher{}
			pub := newPublisher(t, rec)
			runs := 0
			handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
				runs++
				if err := publishInvoice(pub, msg); err != nil {
					return nil, err
				}
				if runs == 1 && failure == "panic" {
					panic("after publishing")
				}
				if runs == 1 {
					return nil, errors.New("after publishing")
				}
				return nil, nil
			})
			func() {
				defer func() { _ = recover() }()
				if _, err := handler(message.NewMessage("order-1", nil)); err == nil {
					t.Error("the failed run returned no error")
				}
			}()
			if n := len(rec.published()); n != 0 {
				t.Fatalf("the failed run published %d messages", n)
			}
			if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
				t.Fatal(err)
			}
			if n := len(rec.published()); n != 1 {
				t.Fatalf("after the retry: %d messages published, want 1", n)
			}
		})
	}
}

// A publish that fails after the commit nacks the message; its redelivery is a duplicate
// that publishes the recorded messages again, byte for byte, without running the handler.
func TestFailedPublishIsRepeatedByTheDuplicateWithTheSameUUIDs(t *testing.T) {
	store := newFakeStore()
	rec := &recordingPublisher{failures: 2}
	pub := newPublisher(t, rec)
	runs := 0
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		runs++
		return nil, publishInvoice(pub, msg)
	})
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err := handler(message.NewMessage("order-1", nil)); err == nil {
			t.Fatalf("attempt %d: a failed publish was not an error", attempt)
		}
	}
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil { // an ack lost, say
		t.Fatal(err)
	}
	sent := rec.published()
	if runs != 1 || len(sent) != 2 || sent[0] != sent[1] || sent[0].meta != "map[order_id:order-1]" {
		t.Fatalf("runs %d, published %+v: want 1 run and the same message twice", runs, sent)
	}
}

// A message without the handler's context is refused, so that it cannot leave before the
// commit; the handler that returns the error is nacked and nothing is published.
func TestPublisherRefusesAMessageWithoutTheHandlersContext(t *testing.T) {
	rec := &recordingPublisher{}
	pub := newPublisher(t, rec)
	if err := pub.Publish("invoices", message.NewMessage("m-1", nil)); !errors.Is(err, inbox.ErrNoHandlerContext) {
		t.Fatalf("outside a handler: err = %v, want ErrNoHandlerContext", err)
	}
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		evt := message.NewMessage("invoice-1", nil) // no evt.SetContext(msg.Context())
		return nil, pub.Publish("invoices", evt)
	})
	_, err := handler(message.NewMessage("order-1", nil))
	if !errors.Is(err, inbox.ErrNoHandlerContext) {
		t.Fatalf("in a handler without its context: err = %v, want ErrNoHandlerContext", err)
	}
	for _, want := range []string{"SetContext", "WithPublishNow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if n := len(rec.published()); n != 0 {
		t.Errorf("published %d message(s), want none", n)
	}
	if store.isCommitted("billing", "order-1") {
		t.Error("the failed handler's claim was committed")
	}
}

func TestPublishNowPublishesAtOnce(t *testing.T) {
	rec := &recordingPublisher{}
	pub := newPublisher(t, rec)
	msg := message.NewMessage("m-1", nil)
	msg.SetContext(inbox.WithPublishNow(context.Background()))
	if err := pub.Publish("invoices", msg); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.published()); n != 1 {
		t.Fatalf("published %d, want 1", n)
	}
	mixed := message.NewMessage("m-2", nil)
	if err := pub.Publish("invoices", msg, mixed); err == nil {
		t.Error("one call with a WithPublishNow message and one without: no error")
	}
}

func TestPublisherBadInput(t *testing.T) {
	if _, err := inbox.NewPublisher(nil); err == nil || !strings.Contains(err.Error(), "publisher is nil") {
		t.Errorf("NewPublisher(nil): err = %v, want one saying the publisher is nil", err)
	}
	rec := &recordingPublisher{}
	pub := newPublisher(t, rec)
	tests := []struct {
		name    string
		publish func(msg *message.Message) error
		want    string
	}{
		{"empty UUID", func(msg *message.Message) error {
			out := message.NewMessage("", nil)
			out.SetContext(msg.Context())
			return pub.Publish("invoices", out)
		}, "empty UUID"},
		{"empty topic", func(msg *message.Message) error {
			out := message.NewMessage("m", nil)
			out.SetContext(msg.Context())
			return pub.Publish("", out)
		}, "empty topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
				return nil, tt.publish(msg)
			})
			if _, err := handler(message.NewMessage("order-1", nil)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
			if store.isCommitted("billing", "order-1") {
				t.Error("the claim committed")
			}
		})
	}
	if n := len(rec.published()); n != 0 {
		t.Errorf("%d messages published", n)
	}
}

func TestPublishAfterTheHandlerReturnedIsAnError(t *testing.T) {
	pub := newPublisher(t, &recordingPublisher{})
	var late context.Context
	handler := newHandler(t, newFakeStore(), inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		late = msg.Context()
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	out := message.NewMessage("m", nil)
	out.SetContext(late)
	if err := pub.Publish("invoices", out); !errors.Is(err, inbox.ErrNoHandlerContext) {
		t.Errorf("Publish = %v, want ErrNoHandlerContext", err)
	}
	if err := inbox.ExecAtCommit(late, "INSERT"); !errors.Is(err, inbox.ErrNoHandlerContext) {
		t.Errorf("ExecAtCommit = %v, want ErrNoHandlerContext", err)
	}
}

func TestPublisherOfAnotherInboxIsAnError(t *testing.T) {
	pub := newPublisher(t, &recordingPublisher{})
	publishes := func(msg *message.Message) ([]*message.Message, error) { return nil, publishInvoice(pub, msg) }
	first := newHandler(t, newFakeStore(), inbox.Config{Consumer: "billing"}, nil, publishes)
	if _, err := first(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	otherStore := newHandler(t, newFakeStore(), inbox.Config{Consumer: "billing"}, nil, publishes)
	if _, err := otherStore(message.NewMessage("order-1", nil)); err == nil || !strings.Contains(err.Error(), "belongs to another inbox") {
		t.Errorf("a claim of another store: err = %v, want the publisher refused as another inbox's", err)
	}
	if _, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{Consumer: "billing", Publisher: pub}, nil); err == nil || !strings.Contains(err.Error(), "belongs to another inbox") {
		t.Errorf("Config.Publisher bound to another store: err = %v, want the publisher refused as another inbox's", err)
	}

	store := newFakeStore()
	second := newPublisher(t, &recordingPublisher{})
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", Publisher: second}, nil, publishes)
	if _, err := handler(message.NewMessage("order-2", nil)); err == nil || !strings.Contains(err.Error(), "belongs to another inbox") {
		t.Errorf("a second Publisher in one inbox: err = %v, want the publisher refused as another inbox's", err)
	}
}

// A duplicate that reaches a fresh process (a new middleware) before any handler published
// is nacked until the middleware knows its Publisher, then publishes the recorded messages.
func TestDuplicateInAFreshProcessNeedsConfigPublisher(t *testing.T) {
	store := newFakeStore()
	rec := &recordingPublisher{failures: 1}
	pub := newPublisher(t, rec)
	runs := 0
	publishes := func(msg *message.Message) ([]*message.Message, error) { runs++; return nil, publishInvoice(pub, msg) }
	before := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, publishes)
	if _, err := before(message.NewMessage("order-1", nil)); err == nil {
		t.Fatal("the failed publish was not an error")
	}

	restarted := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, publishes)
	if _, err := restarted(message.NewMessage("order-1", nil)); !errors.Is(err, inbox.ErrNoPublisher) {
		t.Fatalf("err = %v, want ErrNoPublisher", err)
	}
	configured := newHandler(t, store, inbox.Config{Consumer: "billing", Publisher: pub}, nil, publishes)
	if _, err := configured(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.published()); runs != 1 || n != 1 {
		t.Fatalf("runs %d, published %d: want 1 and 1", runs, n)
	}
}

// components/cqrs buses set the handler's context on the messages they publish, so an
// EventBus built on a Publisher records its events with the claim.
func TestCQRSEventBusPublishesThroughTheClaim(t *testing.T) {
	store := newFakeStore()
	rec := &recordingPublisher{failures: 1}
	pub := newPublisher(t, rec)
	bus, err := cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(cqrs.GenerateEventPublishTopicParams) (string, error) { return "events", nil },
		Marshaler:            cqrs.JSONMarshaler{},
	})
	if err != nil {
		t.Fatal(err)
	}
	type InvoiceCreated struct{ OrderID string }
	runs := 0
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		runs++
		if err := bus.Publish(msg.Context(), &InvoiceCreated{OrderID: msg.UUID}); err != nil {
			return nil, err
		}
		if runs == 1 {
			return nil, errors.New("fails after publishing")
		}
		return nil, nil
	})
	for range 4 { // fail, publish fails, duplicate publishes, duplicate publishes again
		_, _ = handler(message.NewMessage("order-1", nil))
	}
	sent := rec.published()
	if runs != 2 || len(sent) != 2 || sent[0] != sent[1] {
		t.Fatalf("runs %d, published %+v: want 2 runs and one event twice under one UUID", runs, sent)
	}
}

package integration

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
)

// A handler that publishes an event through Config.Publisher, whose broker fails the publish
// after the commit, on every store: the client gets the committed response (201, not a 500
// that says nothing was recorded), with the order's row and claim committed, counted from
// another session, and the failure logged; the retry replays that response and publishes the
// recorded event, once.
func TestHTTPCommittedRequestIsAnsweredWhenPublishFails(t *testing.T) {
	forEachHTTPMode(t, slices.Collect(maps.Keys(httpStores)), func(t *testing.T, b *backend, writeBehind bool) {
		events := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		t.Cleanup(func() { events.Close() })
		received, err := events.Subscribe(context.Background(), "invoices")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		go func() {
			for m := range received {
				mu.Lock()
				got = append(got, string(m.Payload))
				mu.Unlock()
				m.Ack()
			}
		}()
		broker := &failingPublisher{Publisher: events}
		broker.failuresLeft.Store(1)
		publisher, err := inbox.NewPublisher(broker)
		if err != nil {
			t.Fatal(err)
		}
		handler := publishingOrders(b, publisher, "invoices", func(*http.Request) string { return watermill.NewUUID() })
		logger := watermill.NewCaptureLogger()
		server := endpoint(t, b, inboxhttp.Config{WriteBehind: writeBehind, Publisher: publisher}, handler, logger)

		first := post(t, server.Client(), server.URL, "order-1", "order-1", nil)
		if first.status != http.StatusCreated || first.replayed {
			t.Fatalf("the request whose publish failed after the commit: %d, replayed %v: %s; want its own 201",
				first.status, first.replayed, first.body)
		}
		if n := broker.failed.Load(); n != 1 {
			t.Fatalf("%d publishes failed, want the 1 injected", n)
		}
		wantRows(t, "business rows", b.invoices(t, "billing", "order-1"), 1)
		wantRows(t, "claims", b.claims(t, "billing", inboxhttp.ScopedKey("", "order-1")), 1)
		if !slices.ContainsFunc(logger.Captured()[watermill.ErrorLogLevel], func(m watermill.CapturedMessage) bool {
			return m.Msg == "Inbox HTTP: the request is committed, but publishing its recorded messages failed"
		}) {
			t.Error("the failed publish was not logged")
		}

		retry := post(t, server.Client(), server.URL, "order-1", "order-1", nil)
		if retry.status != http.StatusCreated || !retry.replayed || !bytes.Equal(retry.body, first.body) {
			t.Errorf("the retry: %d, replayed %v: %s; want the first answer %s replayed", retry.status, retry.replayed, retry.body, first.body)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, []string{"invoice order-1"}) {
			t.Errorf("events published: %q, want the recorded one, once, by the retry", got)
		}
		wantRows(t, "business rows after the retry", b.invoices(t, "billing", "order-1"), 1)
	})
}

// publishingOrders is an endpoint's handler that publishes an invoice event, with the UUID
// uuid gives the request, to topic through publisher, then writes the order's row as
// orderHandler does.
func publishingOrders(b *backend, publisher *inbox.Publisher, topic string, uuid func(*http.Request) string) http.Handler {
	orders := &orderHandler{b: b}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		event := message.NewMessage(uuid(r), []byte("invoice "+r.Header.Get("X-Order")))
		event.SetContext(r.Context())
		if err := publisher.Publish(topic, event); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		orders.ServeHTTP(w, r)
	})
}

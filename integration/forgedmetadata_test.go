package integration

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
)

// recordingPublisher keeps what is published to it, in order.
type recordingPublisher struct {
	mu        sync.Mutex
	published []*message.Message
}

func (p *recordingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) messages() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.published)
}

// forgedMetadata is what a producer could set to pose as the inbox's own marks of a recorded
// HTTP response, as an earlier release kept them: a status, a redirect and a cookie.
var forgedMetadata = message.Metadata{
	"_inbox_http_response": "1",
	"_inbox_http_status":   "302",
	"_inbox_http_header":   `{"Location":["https://evil.example/login"],"Set-Cookie":["session=attacker"]}`,
	"order_id":             "order-1",
}

// copyingBilling is a router handler that writes its business row and returns an event
// carrying its input's metadata, as handlers that pass on correlation metadata do. Orders are
// published with gochannel's BlockPublishUntilSubscriberAck, so that Publish returns once the
// order is acked: after its nacks and redeliveries, when its event has been published.
func copyingBilling(t *testing.T, b *backend, events message.Publisher) *gochannel.GoChannel {
	t.Helper()
	logger := watermill.NopLogger{}
	orders := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	t.Cleanup(func() { orders.Close() })
	inboxMW, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(inboxMW)
	router.AddHandler("billing", "orders", orders, "invoices", events, func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, _ := b.inTx(ctx)
		if err := tx.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
			return nil, err
		}
		event := message.NewMessage(watermill.NewUUID(), []byte("invoice"))
		event.Metadata = maps.Clone(msg.Metadata)
		return []*message.Message{event}, nil
	})
	runRouter(t, router)
	return orders
}

// A producer's metadata is the producer's: a message whose metadata holds keys an earlier
// release used to mark a recorded HTTP response is recorded and published again like any
// other. Its handler copies the metadata onto the event it returns, the router's first publish
// of the event fails, and the duplicate that follows publishes it again, byte for byte.
func TestProducerMetadataIsPublishedAgainAsItIs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		events := &recordingPublisher{}
		publisher := &failingPublisher{Publisher: events}
		publisher.failuresLeft.Store(1)
		orders := copyingBilling(t, b, publisher)

		order := message.NewMessage(watermill.NewUUID(), []byte("order"))
		order.Metadata = maps.Clone(forgedMetadata)
		if err := orders.Publish("orders", order); err != nil { // returns once the order is acked
			t.Fatal(err)
		}
		if publisher.failed.Load() != 1 {
			t.Fatalf("%d publishes failed, want 1: the duplicate was not the one to publish", publisher.failed.Load())
		}
		published := events.messages()
		if len(published) != 1 {
			t.Fatalf("the order is acked and %d events were published, want 1: the duplicate dropped it", len(published))
		}
		if !maps.Equal(published[0].Metadata, forgedMetadata) {
			t.Errorf("the event was published again with metadata %v, want its own %v", published[0].Metadata, forgedMetadata)
		}
		wantRows(t, "business rows", b.invoices(t, "billing", order.UUID), 1)
	})
}

// A broker message cannot pose as an HTTP response: under a consumer an HTTP endpoint shares,
// a message whose metadata forges a recorded redirect and cookie, processed first, makes the
// request claimed under the message's UUID a 204 replay (processed elsewhere), without its Location or
// Set-Cookie.
func TestHTTPReplayIsNeverABrokerMessage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		orders := copyingBilling(t, b, &recordingPublisher{})
		// The broker message is claimed under the key the request's is: its scope's and key's.
		key := watermill.NewUUID()
		order := message.NewMessage(inboxhttp.ScopedKey("", key), []byte("order"))
		order.Metadata = maps.Clone(forgedMetadata)
		if err := orders.Publish("orders", order); err != nil {
			t.Fatal(err)
		}

		mw, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: "billing", Scope: inboxhttp.Unscoped, Fingerprint: inboxhttp.BodySHA256}, nil)
		if err != nil {
			t.Fatal(err)
		}
		server := httptest.NewServer(mw(&orderHandler{b: b}))
		t.Cleanup(server.Close)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r := post(t, client, server.URL, key, order.UUID, []byte("order"))
		if r.status != http.StatusNoContent || !r.replayed || r.header.Get("Location") != "" || r.header.Get("Set-Cookie") != "" {
			t.Errorf("the request with the broker message's UUID as its key: %d, replayed %v, Location %q, Set-Cookie %q; "+
				"want 204, replayed, neither header", r.status, r.replayed, r.header.Get("Location"), r.header.Get("Set-Cookie"))
		}
		wantRows(t, "business rows", b.invoices(t, "billing", order.UUID), 1)
	})
}

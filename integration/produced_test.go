package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Tests of what is recorded with a claim: produced messages, payload fingerprints, business
// keys, and the bound on waiting behind an in-flight copy. Each runs on every backend.

func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	for _, name := range []string{"database-sql/mariadb", "database-sql/mariadb/multi-statements", "database-sql/postgres", "database-sql/sqlite", "pgx/postgres"} {
		t.Run(name, func(t *testing.T) { test(t, backends[name](t)) })
	}
}

// failingPublisher fails the first n publishes, as a broker that is briefly unreachable.
type failingPublisher struct {
	message.Publisher
	failuresLeft atomic.Int64
	failed       atomic.Int64
}

func (p *failingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.failuresLeft.Add(-1) >= 0 {
		p.failed.Add(1)
		return errors.New("broker unreachable")
	}
	return p.Publisher.Publish(topic, msgs...)
}

// The router publishes a handler's messages after the inbox commits; when that publish fails
// the incoming message is nacked and its redelivery is a duplicate. The duplicate returns the
// recorded messages, so the router publishes them again with their original UUIDs.
func TestProducedMessagesArePublishedDespiteFailedPublishes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const orders, failures = 30, 20
		logger := watermill.NopLogger{}
		pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, logger)
		t.Cleanup(func() { pubSub.Close() })
		out, err := pubSub.Subscribe(context.Background(), "invoices")
		if err != nil {
			t.Fatal(err)
		}
		publisher := &failingPublisher{Publisher: pubSub}
		publisher.failuresLeft.Store(failures)

		var mu sync.Mutex
		produced := map[string]string{} // order -> UUID of the InvoiceCreated its handler made
		runs := map[string]int{}
		inboxMW, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(inboxMW)
		router.AddHandler("billing", "orders", pubSub, "invoices", publisher, func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			tx, _ := b.inTx(ctx)
			if err := tx.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
				return nil, err
			}
			invoice := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"`+msg.UUID+`"}`))
			invoice.Metadata.Set("order_id", msg.UUID)
			mu.Lock()
			defer mu.Unlock()
			runs[msg.UUID]++
			produced[msg.UUID] = invoice.UUID
			return []*message.Message{invoice}, nil
		})
		runRouter(t, router)

		var keys []string
		for range orders {
			key := watermill.NewUUID()
			keys = append(keys, key)
			if err := pubSub.Publish("orders", message.NewMessage(key, []byte(`{}`))); err != nil {
				t.Fatal(err)
			}
		}

		published := map[string]string{} // InvoiceCreated UUID -> order_id metadata
		deadline := time.After(30 * time.Second)
		for len(published) < orders {
			select {
			case msg := <-out:
				published[msg.UUID] = msg.Metadata.Get("order_id")
				msg.Ack()
			case <-deadline:
				t.Fatalf("%d of %d invoices published", len(published), orders)
			}
		}

		mu.Lock()
		defer mu.Unlock()
		for _, key := range keys {
			if runs[key] != 1 {
				t.Errorf("order %s: handler ran %d times, want 1", key, runs[key])
			}
			if got := published[produced[key]]; got != key {
				t.Errorf("order %s: its InvoiceCreated %s was published with order_id %q", key, produced[key], got)
			}
			wantRows(t, "invoices of "+key, b.invoices(t, "billing", key), 1)
		}
		if publisher.failed.Load() != failures {
			t.Errorf("%d publishes failed, want %d", publisher.failed.Load(), failures)
		}
	})
}

func TestHandlerWithoutOutputsRecordsNoMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		h := b.handler(t, "billing", nil, nil)
		for range 2 {
			if err := deliver(context.Background(), h, watermill.NewUUID()); err != nil {
				t.Fatal(err)
			}
		}
		wantRows(t, "claims with produced messages", b.rows(t, b.table, "WHERE produced IS NOT NULL"), 0)
		wantRows(t, "claims with a fingerprint", b.rows(t, b.table, "WHERE payload_hash IS NOT NULL"), 2)
	})
}

func deliverPayload(h message.HandlerFunc, key, payload string) error {
	_, err := h(message.NewMessage(key, []byte(payload)))
	return err
}

func TestDuplicateWithDifferentPayload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		key := watermill.NewUUID()
		first, second := `{"amount":100}`, `{"amount":200}`

		reject := b.handler(t, "billing", nil, nil) // RejectMismatch is the default
		if err := deliverPayload(reject, key, first); err != nil {
			t.Fatal(err)
		}
		if err := deliverPayload(reject, key, first); err != nil {
			t.Errorf("same payload again: %v, want an ack", err)
		}
		err := deliverPayload(reject, key, second)
		var mismatch *inbox.FingerprintMismatchError
		if !errors.As(err, &mismatch) || !errors.Is(err, inbox.ErrFingerprintMismatch) {
			t.Fatalf("different payload: err = %v, want a *FingerprintMismatchError", err)
		}
		stored, received := sha256.Sum256([]byte(first)), sha256.Sum256([]byte(second))
		if mismatch.Key != key || mismatch.Consumer != "billing" ||
			string(mismatch.Stored) != string(stored[:]) || string(mismatch.Received) != string(received[:]) {
			t.Errorf("mismatch = %+v, want key %s, consumer billing and both payloads' SHA-256", mismatch, key)
		}

		logger := watermill.NewCaptureLogger()
		mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", OnFingerprintMismatch: inbox.AckMismatch}, logger)
		if err != nil {
			t.Fatal(err)
		}
		ack := mw(func(*message.Message) ([]*message.Message, error) {
			t.Error("handler ran for a duplicate")
			return nil, nil
		})
		if err := deliverPayload(ack, key, second); err != nil {
			t.Errorf("AckMismatch: err = %v, want an ack", err)
		}
		// CaptureLogger.HasError compares the other way round; look at the errors themselves.
		logged := false
		for _, entry := range logger.Captured()[watermill.ErrorLogLevel] {
			logged = logged || errors.As(entry.Err, &mismatch)
		}
		if !logged {
			t.Error("AckMismatch did not log the mismatch as an error")
		}
		wantRows(t, "invoices", b.invoices(t, "billing", key), 1)

		// A claim stored without a fingerprint (payload_hash NULL) does not match a copy with
		// one: the check is not off for its key.
		unhashed := watermill.NewUUID()
		none, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", Fingerprint: func(*message.Message) []byte { return nil }}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := deliverPayload(none(func(*message.Message) ([]*message.Message, error) { return nil, nil }), unhashed, first); err != nil {
			t.Fatal(err)
		}
		wantRows(t, "claims without a fingerprint", b.rows(t, b.table, "WHERE payload_hash IS NULL"), 1)
		err = deliverPayload(reject, unhashed, first)
		if !errors.As(err, &mismatch) || len(mismatch.Stored) != 0 || string(mismatch.Received) != string(stored[:]) {
			t.Errorf("a copy with a fingerprint of a claim stored without one: err = %v, want a *FingerprintMismatchError", err)
		}
	})
}

// A producer re-sends the same business event under a new UUID; a business key from the
// metadata catches it where the UUID cannot.
func TestBusinessKeyCatchesResentEventWithNewUUID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", Key: inbox.KeyFromMetadata("order_id")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			runs++
			ctx := msg.Context()
			tx, _ := b.inTx(ctx)
			key, _ := inbox.KeyFromContext(ctx)
			return nil, tx.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", key)
		})
		for range 3 {
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"A-1001"}`)) // a new UUID each time
			msg.Metadata.Set("order_id", "A-1001")
			if _, err := h(msg); err != nil {
				t.Fatal(err)
			}
		}
		if runs != 1 {
			t.Errorf("handler ran %d times for one order re-sent under new UUIDs, want 1", runs)
		}
		wantRows(t, "invoices of A-1001", b.invoices(t, "billing", "A-1001"), 1)

		if _, err := h(message.NewMessage(watermill.NewUUID(), nil)); !errors.Is(err, inbox.ErrInvalidKey) {
			t.Errorf("message without order_id: err = %v, want ErrInvalidKey", err)
		}
	})
}

// A copy that arrives while the first copy's transaction is open waits on the key. With
// LockTimeout it gives up (nack, redelivered later) while the first is still stuck.
func TestLockTimeoutBoundsWaitBehindInFlightCopy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		store, err := b.newStore(sqlinbox.Config{Table: b.table, LockTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		b.store = store
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		h := b.handler(t, "billing", nil, func(*message.Message) error {
			once.Do(func() { close(entered); <-release })
			return nil
		})
		key := watermill.NewUUID()
		first := make(chan error, 1)
		go func() { first <- deliver(context.Background(), h, key) }()
		<-entered

		second := make(chan error, 1)
		go func() { second <- deliver(context.Background(), h, key) }()
		select {
		case err := <-second:
			if err == nil {
				t.Fatal("the copy behind the in-flight one was acked while the first had not committed")
			}
			t.Logf("nack while the first copy is in flight: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the copy behind the in-flight one is still waiting")
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("first copy: %v", err)
		}
		if err := deliver(context.Background(), h, key); err != nil {
			t.Errorf("redelivery of the second copy: %v, want an ack as a duplicate", err)
		}
		wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	})
}

// A subscriber that closes cancels the message context, possibly after the handler has done
// its work: the handler's success still commits (the middleware decides, not the context).
func TestHandlerSuccessCommitsAfterContextCancelled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := b.handler(t, "billing", nil, func(*message.Message) error {
			cancel() // after the invoice is written, before the commit
			return nil
		})
		key := watermill.NewUUID()
		if err := deliver(ctx, h, key); err != nil {
			t.Fatalf("the handler succeeded, yet: %v", err)
		}
		wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
		wantRows(t, "claims", b.claims(t, "billing", key), 1)
	})
}

package inbox_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

func TestWriteBehindHandlerGetsNoTxAndItsQueuedWritesCommitWithTheClaim(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil, func(msg *message.Message) ([]*message.Message, error) {
		if _, ok := inbox.TxFromContext[*fakeTx](msg.Context()); ok {
			t.Error("TxFromContext in write-behind mode: ok = true")
		}
		if key, ok := inbox.KeyFromContext(msg.Context()); !ok || key != "order-1" {
			t.Errorf("KeyFromContext = %q, %v", key, ok)
		}
		if store.claims != 0 {
			t.Error("claimed before the handler ran")
		}
		return nil, errors.Join(inbox.ExecAtCommit(msg.Context(), "INSERT 1"), inbox.ExecAtCommit(msg.Context(), "INSERT 2"))
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	if got := store.committedWrites("billing", "order-1"); !slices.Equal(got, []string{"INSERT 1", "INSERT 2"}) {
		t.Errorf("committed writes %q, want both, in order", got)
	}
}

// In write-behind mode a duplicate runs the handler, but its writes and messages are
// discarded and the first run's messages are returned.
func TestWriteBehindDuplicateDiscardsTheHandlersEffects(t *testing.T) {
	store := newFakeStore()
	rec := &recordingPublisher{}
	pub := newPublisher(t, rec)
	runs := 0
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil, func(msg *message.Message) ([]*message.Message, error) {
		runs++
		if err := inbox.ExecAtCommit(msg.Context(), "INSERT run"); err != nil {
			return nil, err
		}
		if err := publishInvoice(pub, msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage("returned-"+string(rune('0'+runs)), nil)}, nil
	})
	first, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	again, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	sent := rec.published()
	if runs != 2 || len(again) != 1 || again[0].UUID != first[0].UUID || len(sent) != 2 || sent[0] != sent[1] {
		t.Fatalf("runs %d, returned %v then %v, published %+v: want the first run's messages twice", runs, first, again, sent)
	}
	if got := store.committedWrites("billing", "order-1"); len(got) != 1 {
		t.Errorf("committed writes %q, want the first run's one", got)
	}
}

func TestWriteBehindHandlerErrorClaimsNothing(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil, func(msg *message.Message) ([]*message.Message, error) {
		_ = inbox.ExecAtCommit(msg.Context(), "INSERT")
		return nil, errors.New("boom")
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err == nil {
		t.Fatal("no error")
	}
	if store.claims != 0 {
		t.Errorf("%d claims, want none", store.claims)
	}
}

// writeBehindStore records that the one-step path was taken.
type writeBehindStore struct {
	*fakeStore
	oneStep int
}

func (s *writeBehindStore) ClaimAndCommit(ctx context.Context, c inbox.Claim, statements []inbox.Statement, produced []byte) (*inbox.Record, error) {
	s.oneStep++
	tx, prior, err := s.Claim(ctx, c)
	if err != nil || prior != nil {
		return prior, err
	}
	for _, st := range statements {
		tx.(*fakeTx).ExecAtCommit(st.SQL, st.Args...)
	}
	return nil, tx.Commit(ctx, produced)
}

func TestWriteBehindUsesTheStoresOneStepPath(t *testing.T) {
	store := &writeBehindStore{fakeStore: newFakeStore()}
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil, func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.ExecAtCommit(msg.Context(), "INSERT")
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	if store.oneStep != 1 || !store.isCommitted("billing", "order-1") {
		t.Errorf("one-step calls %d, committed %v", store.oneStep, store.isCommitted("billing", "order-1"))
	}
}

func TestSkipAcksWithoutAClaimOrTheHandler(t *testing.T) {
	store := newFakeStore()
	runs := 0
	skip := func(msg *message.Message) bool { return msg.Metadata.Get("name") != "OrderPlaced" }
	handler := newHandler(t, store, inbox.Config{Consumer: "billing", Skip: skip}, nil, func(*message.Message) ([]*message.Message, error) {
		runs++
		return nil, nil
	})
	other := message.NewMessage("event-1", nil)
	other.Metadata.Set("name", "OrderShipped")
	if _, err := handler(other); err != nil {
		t.Fatal(err)
	}
	placed := message.NewMessage("event-2", nil)
	placed.Metadata.Set("name", "OrderPlaced")
	if _, err := handler(placed); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || store.claims != 1 || !store.isCommitted("billing", "event-2") {
		t.Errorf("runs %d, claims %d: want the handled type only", runs, store.claims)
	}
}

func TestConsumerByHandlerKeepsTheConsumerAcrossARename(t *testing.T) {
	store := newFakeStore()
	config := inbox.Config{ConsumerByHandler: map[string]string{
		"billing":    "billing",
		"billing_v2": "billing", // renamed from "billing" to "billing_v2"
	}}
	var runs atomic.Int32
	for _, name := range []string{"billing", "billing_v2"} { // one deploy, then the next
		mw, err := inbox.NewMiddleware(store, config, nil)
		if err != nil {
			t.Fatal(err)
		}
		pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(mw)
		router.AddConsumerHandler(name, "orders", pubSub, func(*message.Message) error { runs.Add(1); return nil })
		go func() { _ = router.Run(context.Background()) }()
		<-router.Running()
		// Returns once the message is acked.
		if err := pubSub.Publish("orders", message.NewMessage("order-1", nil)); err != nil {
			t.Fatal(err)
		}
		if err := router.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 1 || !store.isCommitted("billing", "order-1") {
		t.Errorf("handler ran %d times across the rename, want 1 under consumer billing", n)
	}
	if _, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "a", ConsumerByHandler: config.ConsumerByHandler}, nil); err == nil {
		t.Error("Consumer and ConsumerByHandler together: no error")
	}
	if _, err := inbox.NewMiddleware(store, inbox.Config{ConsumerByHandler: map[string]string{"billing": ""}}, nil); err == nil {
		t.Error("a handler mapped to no consumer: no error")
	}
}

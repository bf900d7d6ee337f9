package inbox_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

func TestDuplicateReturnsTheRecordedProducedMessages(t *testing.T) {
	store := newFakeStore()
	runs := 0
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		runs++
		out := message.NewMessage(watermill.NewUUID(), []byte("invoice for "+msg.UUID))
		out.Metadata.Set("order_id", msg.UUID)
		return []*message.Message{out}, nil
	})

	first, err := handler(message.NewMessage("order-1", nil))
	if err != nil || len(first) != 1 {
		t.Fatalf("first delivery: %d messages, err %v", len(first), err)
	}
	again, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	if len(again) != 1 || !again[0].Equals(first[0]) {
		t.Errorf("duplicate returned %v, want the first delivery's message (same UUID, metadata, payload)", again)
	}
}

func TestNoProducedMessagesRecordsNothing(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	if prior := store.committed[[2]string{"billing", "order-1"}]; prior.Produced != nil {
		t.Errorf("recorded %q for a handler that returned nothing", prior.Produced)
	}
}

func TestFingerprintMismatchPolicies(t *testing.T) {
	noop := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	t.Run("reject is the default", func(t *testing.T) {
		store := newFakeStore()
		handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, noop)
		if _, err := handler(message.NewMessage("k", []byte("a"))); err != nil {
			t.Fatal(err)
		}
		_, err := handler(message.NewMessage("k", []byte("b")))
		var mismatch *inbox.FingerprintMismatchError
		if !errors.As(err, &mismatch) {
			t.Fatalf("err = %v, want *FingerprintMismatchError", err)
		}
		if !bytes.Equal(mismatch.Stored, inbox.PayloadSHA256(message.NewMessage("", []byte("a")))) {
			t.Error("Stored is not the first payload's SHA-256")
		}
	})
	t.Run("ack", func(t *testing.T) {
		store := newFakeStore()
		handler := newHandler(t, store, inbox.Config{Consumer: "billing", OnFingerprintMismatch: inbox.AckMismatch}, nil, noop)
		for _, payload := range []string{"a", "b"} {
			if _, err := handler(message.NewMessage("k", []byte(payload))); err != nil {
				t.Fatalf("payload %q: %v", payload, err)
			}
		}
	})
	t.Run("no fingerprint", func(t *testing.T) {
		store := newFakeStore()
		none := func(*message.Message) []byte { return nil }
		handler := newHandler(t, store, inbox.Config{Consumer: "billing", Fingerprint: none}, nil, noop)
		for _, payload := range []string{"a", "b"} {
			if _, err := handler(message.NewMessage("k", []byte(payload))); err != nil {
				t.Fatalf("payload %q: %v", payload, err)
			}
		}
	})
	// A claim stored without a fingerprint (by a Fingerprint that returned nil for the first
	// message) does not match a copy with one; a copy without one compares nothing.
	t.Run("stored without a fingerprint", func(t *testing.T) {
		byField := func(msg *message.Message) []byte {
			if v := msg.Metadata.Get("amount"); v != "" {
				return []byte(v)
			}
			return nil
		}
		withAmount := func(amount string) *message.Message {
			msg := message.NewMessage("k", nil)
			msg.Metadata.Set("amount", amount)
			return msg
		}
		for _, policy := range []inbox.MismatchPolicy{inbox.RejectMismatch, inbox.AckMismatch} {
			store := newFakeStore()
			runs := 0
			handler := newHandler(t, store, inbox.Config{Consumer: "billing", Fingerprint: byField, OnFingerprintMismatch: policy}, nil,
				func(*message.Message) ([]*message.Message, error) { runs++; return nil, nil })
			if _, err := handler(message.NewMessage("k", nil)); err != nil { // stored without one
				t.Fatal(err)
			}
			_, err := handler(withAmount("100"))
			var mismatch *inbox.FingerprintMismatchError
			switch {
			case policy == inbox.RejectMismatch && (!errors.As(err, &mismatch) || mismatch.Stored != nil ||
				!strings.Contains(err.Error(), "fingerprint none, this copy has 313030")):
				t.Errorf("reject: err = %v, want a *FingerprintMismatchError with no stored fingerprint", err)
			case policy == inbox.AckMismatch && err != nil:
				t.Errorf("ack: err = %v", err)
			}
			if _, err := handler(message.NewMessage("k", []byte("other"))); err != nil {
				t.Errorf("policy %d: a copy without a fingerprint: %v, want a duplicate", policy, err)
			}
			if runs != 1 {
				t.Errorf("policy %d: the handler ran %d times", policy, runs)
			}
		}
	})
	t.Run("unknown policy", func(t *testing.T) {
		if _, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{OnFingerprintMismatch: 7}, nil); err == nil {
			t.Error("NewMiddleware accepted an unknown policy")
		}
	})
}

func TestKeyFromMetadata(t *testing.T) {
	key := inbox.KeyFromMetadata("order_id")
	msg := message.NewMessage("uuid", nil)
	if _, err := key(msg); !errors.Is(err, inbox.ErrInvalidKey) {
		t.Errorf("missing field: err = %v, want ErrInvalidKey", err)
	}
	msg.Metadata.Set("order_id", "A-1001")
	if got, err := key(msg); got != "A-1001" || err != nil {
		t.Errorf("key = %q, %v; want A-1001", got, err)
	}
}

// Any bytes in a produced message's UUID and metadata come back unchanged: a UUID that came
// back altered would be republished as another message.
func TestRecordedProducedMessagesKeepInvalidUTF8(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		out := message.NewMessage("out-\xff\xfe", []byte{0, 0xff})
		out.Metadata.Set("\xff", "v\x00\xfe")
		return []*message.Message{out}, nil
	})
	first, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	again, err := handler(message.NewMessage("order-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || !again[0].Equals(first[0]) {
		t.Errorf("duplicate returned %q %q, want %q %q", again[0].UUID, again[0].Metadata, first[0].UUID, first[0].Metadata)
	}
}

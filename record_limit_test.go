package inbox_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// A handler that returns a 100 MB message fails with ErrRecordTooLarge before the store sees
// anything of it, in both modes, and refusing it does not copy the payload: the whole
// delivery, the payload's own allocation included, allocates less than 3 times the payload
// (without the bound, encoding such a record allocated 5 times, before any database).
func TestAHundredMegabyteRecordIsRefusedBeforeTheStore(t *testing.T) {
	const size = 100 << 20
	for _, writeBehind := range []bool{false, true} {
		store := newFakeStore()
		handler := newHandler(t, store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil,
			func(msg *message.Message) ([]*message.Message, error) {
				return []*message.Message{message.NewMessage("invoice-1", make([]byte, size))}, nil
			})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		returned, err := handler(message.NewMessage("order-1", nil))
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("write-behind=%v: %d MiB allocated for a %d MiB payload", writeBehind, allocated>>20, size>>20)

		if !errors.Is(err, inbox.ErrRecordTooLarge) || !inbox.Poisonous(err) || returned != nil {
			t.Fatalf("write-behind=%v: %d messages, err = %v, want ErrRecordTooLarge", writeBehind, len(returned), err)
		}
		for _, want := range []string{"Config.MaxRecorded is 4194304", "max_allowed_packet", `key "order-1"`, `consumer "billing"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %s", err, want)
			}
		}
		if allocated >= 3*size {
			t.Errorf("write-behind=%v: %d bytes allocated, want under 3 times the payload (%d)", writeBehind, allocated, 3*size)
		}
		if store.isCommitted("billing", "order-1") {
			t.Errorf("write-behind=%v: committed", writeBehind)
		}
		if wantClaims := map[bool]int{false: 1, true: 0}[writeBehind]; store.claims != wantClaims || store.rollbacks != wantClaims {
			t.Errorf("write-behind=%v: %d claims, %d rollbacks; want %d of each", writeBehind, store.claims, store.rollbacks, wantClaims)
		}
	}
}

// MaxRecorded bounds the record's exact size: a record of exactly MaxRecorded bytes commits,
// one byte more is refused, whether its messages are returned or published.
func TestMaxRecordedIsTheExactBound(t *testing.T) {
	produce := func(pub *inbox.Publisher) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out := message.NewMessage("invoice-"+msg.UUID, []byte(strings.Repeat("x", 3000)))
			out.Metadata.Set("order_id", msg.UUID)
			if pub == nil {
				return []*message.Message{out}, nil
			}
			out.SetContext(msg.Context())
			return nil, pub.Publish("invoices", out)
		}
	}
	for _, published := range []bool{false, true} {
		var pub *inbox.Publisher
		rec := &recordingPublisher{}
		if published {
			pub = newPublisher(t, rec)
		}
		store := newFakeStore()
		if _, err := newHandler(t, store, inbox.Config{Consumer: "c"}, nil, produce(pub))(message.NewMessage("k0", nil)); err != nil {
			t.Fatal(err)
		}
		exact := int64(len(store.committed[[2]string{"c", "k0"}].Produced))

		for i, tt := range []struct {
			limit   int64
			wantErr bool
		}{{exact, false}, {exact - 1, true}} {
			h := newHandler(t, store, inbox.Config{Consumer: "c", MaxRecorded: tt.limit}, nil, produce(pub))
			sent := len(rec.sent)
			key := fmt.Sprintf("k%d", i+1) // a key of the same length: a record of the same size
			_, err := h(message.NewMessage(key, nil))
			if tt.wantErr != errors.Is(err, inbox.ErrRecordTooLarge) || tt.wantErr == store.isCommitted("c", key) {
				t.Errorf("published=%v, a record of %d bytes, MaxRecorded %d: err = %v, committed %v",
					published, exact, tt.limit, err, store.isCommitted("c", key))
			}
			if tt.wantErr && len(rec.sent) != sent {
				t.Errorf("published=%v: a refused record's message was published", published)
			}
		}
	}
	if _, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{Consumer: "c", MaxRecorded: -1}, nil); err == nil {
		t.Error("a negative MaxRecorded was accepted")
	}
}

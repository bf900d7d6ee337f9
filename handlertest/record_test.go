package handlertest

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// memoryStore claims every key anew and keeps the record its last Commit got.
type memoryStore struct{ record []byte }

func (s *memoryStore) Claim(context.Context, inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	return &memoryTx{s}, nil, nil
}

type memoryTx struct{ s *memoryStore }

func (t *memoryTx) Handle() any                              { return t }
func (t *memoryTx) ExecAtCommit(string, ...any)              {}
func (t *memoryTx) Rollback(context.Context) error           { return nil }
func (t *memoryTx) Commit(_ context.Context, p []byte) error { t.s.record = p; return nil }

// The kit reads the messages a handler published out of the record the real middleware
// makes: a change of the record's form fails here, not silently in a team's test.
func TestRecordOfTheMiddlewareIsRead(t *testing.T) {
	store := &memoryStore{}
	recorder := NewRecorder()
	publisher, err := inbox.NewPublisher(recorder)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "c", Publisher: publisher}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		event := message.NewMessage("event-1", []byte("issued"))
		event.SetContext(msg.Context())
		if err := publisher.Publish("invoices", event); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage("receipt-1", []byte("receipt"))}, nil
	})
	if _, err := h(message.NewMessage("m-1", nil)); err != nil {
		t.Fatal(err)
	}
	got, ok := publishedIn(store.record)
	if !ok || len(got) != 1 || got[0].Topic != "invoices" || got[0].UUID != "event-1" || string(got[0].Payload) != "issued" {
		t.Fatalf("publishedIn(%s) = %+v, %v; want the one published message", store.record, got, ok)
	}
	if _, missing := compareProduced(recorder.Messages(), got); len(missing) > 0 {
		t.Errorf("the Recorder got %+v, the record holds %+v", recorder.Messages(), got)
	}
	if got, ok := publishedIn(nil); !ok || len(got) != 0 {
		t.Errorf("publishedIn(nil) = %+v, %v; want nothing, known", got, ok)
	}
}

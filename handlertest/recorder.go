package handlertest

import (
	"maps"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Recorder is a message.Publisher that keeps what it is given, in order, for the kit to see
// what a handler publishes. Wrap it with inbox.NewPublisher and set the result as the
// Case's Config.Publisher (and give it to the handler, or to its cqrs buses, as production
// gives them the broker's inbox.Publisher); set the Recorder itself as Case.Recorder. It is
// safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	messages []Published
}

var _ message.Publisher = (*Recorder)(nil)

// Published is a message the Recorder was given. Topic is "" for a message the handler
// returned (the router publishes those to the handler's topic).
type Published struct {
	Topic    string
	UUID     string
	Payload  []byte
	Metadata map[string]string
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Publish records messages; it never fails.
func (r *Recorder) Publish(topic string, messages ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range messages {
		r.messages = append(r.messages, published(topic, m))
	}
	return nil
}

// Close does nothing; a Recorder keeps recording after it.
func (r *Recorder) Close() error { return nil }

// Messages returns a copy of every message recorded so far, in order.
func (r *Recorder) Messages() []Published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Published(nil), r.messages...)
}

// mark returns how many messages are recorded, for since.
func (r *Recorder) mark() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.messages)
}

// since returns the messages recorded after mark returned n.
func (r *Recorder) since(n int) []Published {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Published(nil), r.messages[n:]...)
}

func published(topic string, m *message.Message) Published {
	return Published{Topic: topic, UUID: m.UUID, Payload: append([]byte(nil), m.Payload...), Metadata: maps.Clone(map[string]string(m.Metadata))}
}

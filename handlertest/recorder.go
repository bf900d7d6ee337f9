package handlertest

import (
	"maps"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Recorder is a [message.Publisher] that keeps what it is given, in order, for handlertest to see
// what a handler publishes. Wrap it with inbox.NewPublisher and set the result as the
// [Case]'s Config.Publisher (and give it to the handler, or to its cqrs buses, as production
// gives them the broker's inbox.Publisher); set the Recorder itself as [Options.Recorder]. It
// is safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	messages []Produced
}

var _ message.Publisher = (*Recorder)(nil)

// Produced is a message a handler produced: published to Topic, or returned (Topic "", for
// the router to publish to the handler's topic). The [Recorder]'s messages all have a topic.
type Produced struct {
	Topic    string
	UUID     string
	Payload  []byte
	Metadata map[string]string
}

// NewRecorder returns an empty [Recorder].
func NewRecorder() *Recorder { return &Recorder{} }

// Publish records messages; it never fails.
func (r *Recorder) Publish(topic string, messages ...*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range messages {
		r.messages = append(r.messages, produced(topic, m))
	}
	return nil
}

// Close does nothing; a [Recorder] keeps recording after it.
func (r *Recorder) Close() error { return nil }

// Messages returns a copy of every message recorded so far, in order.
func (r *Recorder) Messages() []Produced {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Produced(nil), r.messages...)
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
func (r *Recorder) since(n int) []Produced {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Produced(nil), r.messages[n:]...)
}

func produced(topic string, m *message.Message) Produced {
	return Produced{Topic: topic, UUID: m.UUID, Payload: append([]byte(nil), m.Payload...), Metadata: maps.Clone(map[string]string(m.Metadata))}
}

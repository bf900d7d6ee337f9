package inbox

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/internal/cause"
	"github.com/inboxkit/watermill-inbox/internal/record"
)

// Publisher is a [message.Publisher] for handlers that publish instead of returning their
// messages: components/cqrs event and command buses, or a handler that calls a publisher
// itself. Inside an inbox handler its messages are recorded with the claim and published
// only after the claim commits, so a handler that fails after publishing sends nothing, and
// a redelivery sends exactly what the committed run published, under the same UUIDs.
//
// Publish decides by each message's context (msg.Context(); cqrs buses set it to the
// handler's context, a handler that builds messages itself must call
// msg.SetContext(handlerMsg.Context())):
//
//   - a context that carries an inbox claim: the message is recorded with the claim, in the
//     same transaction as the claim and the handler's writes. After the commit the
//     middleware publishes the recorded messages through the wrapped publisher, in order,
//     with their UUIDs and metadata byte for byte. If that publish fails the incoming
//     message is nacked; its redelivery is a duplicate, and the middleware publishes the
//     recorded messages again with the same UUIDs. Consumers downstream deduplicate them.
//   - a context from WithPublishNow: the message is published at once, through the wrapped
//     publisher. This is how code that is not an inbox handler (a start-up job, an HTTP
//     endpoint not behind inboxhttp, whose handlers are inbox handlers) publishes through the
//     same buses.
//   - any other context: Publish refuses the message with an error wrapping
//     ErrNoHandlerContext and publishes nothing. A message built inside a handler without
//     the handler's context would otherwise leave at once, before the commit, and also when
//     the handler then fails.
//
// One [Publisher] serves the inboxes of one [Store], and one inbox middleware publishes through
// one Publisher: share it between an EventBus and a CommandBus. Set [Config.Publisher] so that
// a duplicate arriving in a process whose handlers have not published yet can publish the
// recorded messages again.
type Publisher struct {
	publisher message.Publisher

	mu    sync.Mutex
	store Store // the store whose claims it records with; set on first use
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher wraps publisher, which must not be nil.
func NewPublisher(publisher message.Publisher) (*Publisher, error) {
	if publisher == nil {
		return nil, errors.New("inbox: NewPublisher: publisher is nil")
	}
	return &Publisher{publisher: publisher}, nil
}

// Publish records messages whose context carries an inbox claim and publishes at once those
// whose context comes from [WithPublishNow]; see [Publisher]. Messages of one call must either all
// carry the same claim or all come from WithPublishNow. It returns an error wrapping
// [ErrNoHandlerContext] for a message with neither and after the handler returned, and inside
// a claim an error for a message without a UUID, for an empty topic, and when the claim
// belongs to another [Store]'s inbox or to an inbox that publishes through another Publisher.
func (p *Publisher) Publish(topic string, messages ...*message.Message) error {
	if len(messages) == 0 {
		return nil
	}
	now := publishesNow(messages[0].Context())
	c, inClaim := scopeFrom(messages[0].Context())
	for _, msg := range messages[1:] {
		other, ok := scopeFrom(msg.Context())
		if publishesNow(msg.Context()) != now || (!now && (ok != inClaim || other != c)) {
			return errors.New("inbox: messages of one Publish call carry different inbox claims; publish them separately")
		}
	}
	if now {
		return p.publisher.Publish(topic, messages...)
	}
	if !inClaim {
		return fmt.Errorf("%w (message %q, topic %q): inside a handler call msg.SetContext(handlerMsg.Context()) "+
			"before publishing; outside one, publish with inbox.WithPublishNow(ctx)", ErrNoHandlerContext, messages[0].UUID, topic)
	}
	if topic == "" {
		return errors.New("inbox: publish to an empty topic")
	}
	for _, msg := range messages {
		if msg.UUID == "" {
			// Downstream inboxes could not recognise its copies.
			return fmt.Errorf("inbox: a message published inside an inbox handler has an empty UUID (topic %q)", topic)
		}
	}
	if err := c.inbox.usePublisher(p); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return fmt.Errorf("%w: Publish called after %w", ErrNoHandlerContext, cause.ErrAfterReturn)
	}
	for _, msg := range messages {
		// A copy: the handler may reuse or change its message after Publish returns.
		c.published = append(c.published, record.Message{Topic: topic, Msg: copyMessage(msg)})
	}
	return nil
}

// Close closes the wrapped publisher.
func (p *Publisher) Close() error { return p.publisher.Close() }

// bind ties p to store on first use; a claim from another store is an error.
func (p *Publisher) bind(store Store) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.store == nil {
		p.store = store
		return nil
	}
	if p.store != store {
		return fmt.Errorf("inbox: %w: it records with the claims of another Store, and one Publisher serves the inboxes of one Store", cause.ErrPublisherMismatch)
	}
	return nil
}

// publish sends recorded messages through the wrapped publisher, in order, one Publish call
// per run of messages with the same topic.
func (p *Publisher) publish(pubs []record.Message) error {
	for start := 0; start < len(pubs); {
		end := start + 1
		for end < len(pubs) && pubs[end].Topic == pubs[start].Topic {
			end++
		}
		msgs := make([]*message.Message, 0, end-start)
		for _, pub := range pubs[start:end] {
			msgs = append(msgs, pub.Msg)
		}
		if err := p.publisher.Publish(pubs[start].Topic, msgs...); err != nil {
			return fmt.Errorf("inbox: publish %d recorded message(s) to topic %q: %w", len(msgs), pubs[start].Topic, err)
		}
		start = end
	}
	return nil
}

// copyMessage copies the fields that are recorded: UUID, metadata and payload.
func copyMessage(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, append([]byte(nil), msg.Payload...))
	for k, v := range msg.Metadata {
		out.Metadata.Set(k, v)
	}
	return out
}

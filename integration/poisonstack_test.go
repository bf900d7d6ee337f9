package integration

import (
	"math"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/inboxkit/watermill-inbox"
)

// The recommended stack of the README, built in one place for the tests that check that a
// database failing is not the message failing (poison_test.go, transient_test.go).

// poisonRetries is how many times the recommended Retry retries the message's own failure
// before PoisonQueue takes it (inbox.ShouldRetry's retries); a failure of the database is
// retried for as long as it lasts.
const poisonRetries = 3

// retryMaxInterval is the recommended Retry's MaxInterval: the longest a message waits,
// once the database is back, before its next attempt.
const retryMaxInterval = 2 * time.Second

// recommendedRetry is the README's Retry.
func recommendedRetry(logger watermill.LoggerAdapter) middleware.Retry {
	return middleware.Retry{
		MaxRetries:      math.MaxInt32,
		InitialInterval: 50 * time.Millisecond,
		Multiplier:      1.5,
		MaxInterval:     retryMaxInterval,
		ShouldRetry:     inbox.ShouldRetry(poisonRetries, logger),
		Logger:          logger,
	}
}

// recommendedPoisonStack is the README's stack around the inbox middleware inboxMW, outermost
// first: PoisonQueueWithFilter(inbox.Poisonous), Retry, Recoverer, the inbox, Timeout, CorrelationID.
// PoisonQueue publishes to topic through pub.
func recommendedPoisonStack(pub message.Publisher, topic string, inboxMW message.HandlerMiddleware,
	timeout time.Duration, logger watermill.LoggerAdapter,
) ([]message.HandlerMiddleware, error) {
	poisonMW, err := middleware.PoisonQueueWithFilter(pub, topic, inbox.Poisonous)
	if err != nil {
		return nil, err
	}
	return []message.HandlerMiddleware{
		poisonMW,
		recommendedRetry(logger).Middleware,
		middleware.Recoverer,
		inboxMW,
		middleware.Timeout(timeout),
		middleware.CorrelationID,
	}, nil
}

// poisonRecorder is the poison queue's publisher: it keeps what PoisonQueue published and
// passes it on to next, if any.
type poisonRecorder struct {
	next message.Publisher

	mu   sync.Mutex
	msgs []*message.Message
}

func (p *poisonRecorder) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.msgs = append(p.msgs, msgs...)
	p.mu.Unlock()
	if p.next == nil {
		return nil
	}
	return p.next.Publish(topic, msgs...)
}

func (p *poisonRecorder) Close() error { return nil }

// poisoned returns what was published to the poison queue so far.
func (p *poisonRecorder) poisoned() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.msgs...)
}

package integration

import (
	"errors"
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

// poisonRetries is how many times the recommended Retry retries an error that is the
// message's before PoisonQueue takes it; a failure of the database is retried for as long as
// it lasts.
const poisonRetries = 3

// retryMaxInterval caps the recommended Retry's backoff: the longest a message waits, once
// the database is back, before its next attempt.
const retryMaxInterval = time.Second

// recommendedRetry is the README's Retry: infrastructure failures (inbox.Poisonous false)
// without end, with a backoff capped at retryMaxInterval; the message's own errors
// poisonRetries times.
func recommendedRetry(logger watermill.LoggerAdapter) middleware.Retry {
	return middleware.Retry{
		MaxRetries:      math.MaxInt32,
		InitialInterval: 100 * time.Millisecond,
		MaxInterval:     retryMaxInterval,
		Multiplier:      2,
		ShouldRetry: func(p middleware.RetryParams) bool {
			return !poisonous(p.Err) || p.RetryNum < poisonRetries
		},
		Logger: logger,
	}
}

// recommendedPoisonStack is the README's stack around the inbox middleware inboxMW, outermost
// first: PoisonQueueWithFilter(poisonous), Retry, Recoverer, the inbox, Timeout, CorrelationID.
// PoisonQueue publishes to topic through pub.
func recommendedPoisonStack(pub message.Publisher, topic string, inboxMW message.HandlerMiddleware,
	timeout time.Duration, logger watermill.LoggerAdapter,
) ([]message.HandlerMiddleware, error) {
	poisonMW, err := middleware.PoisonQueueWithFilter(pub, topic, poisonous)
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

// --- stand-in for inbox.Poisonous until it lands: deleted then. ---

// transientMark marks an error the store reported transient.
type transientMark struct{ err error }

func (e *transientMark) Error() string { return e.err.Error() }
func (e *transientMark) Unwrap() error { return e.err }

func poisonous(err error) bool {
	var m *transientMark
	return !errors.As(err, &m)
}

// newInboxMiddleware is inbox.NewMiddleware, plus the stand-in's marking of the errors the
// store reports transient.
func newInboxMiddleware(store interface {
	inbox.Store
	IsTransient(error) bool
}, config inbox.Config, logger watermill.LoggerAdapter) (message.HandlerMiddleware, error) {
	mw, err := inbox.NewMiddleware(store, config, logger)
	if err != nil {
		return nil, err
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		inner := mw(h)
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := inner(msg)
			if err != nil && store.IsTransient(err) {
				err = &transientMark{err}
			}
			return out, err
		}
	}, nil
}

package inboxtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// suite is one case's harness and options.
type suite struct {
	*Harness
	options Options
}

func (s *suite) writeBehind() bool { return s.options.Config.WriteBehind }

// queues reports whether the handlers write with [inbox.ExecAtCommit].
func (s *suite) queues() bool { return s.writeBehind() || s.options.ExecAtCommit }

func (s *suite) placeholders(query string) string {
	if s.Placeholders == nil {
		return query
	}
	return s.Placeholders(query)
}

func (s *suite) retriable(err error) bool { return s.Retriable != nil && s.Retriable(err) }

// recorder counts, per key, how often the handler ran and how often it failed.
type recorder struct {
	mu     sync.Mutex
	runs   map[string]int
	failed map[string]int
}

func newRecorder() *recorder {
	return &recorder{runs: map[string]int{}, failed: map[string]int{}}
}

func (r *recorder) ran(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key]++
	if err != nil {
		r.failed[key]++
	}
}

func (r *recorder) counts(key string) (runs, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key], r.failed[key]
}

// handler returns the inbox-wrapped handler for consumer that writes one business row per
// message: through the transaction, or queued with [inbox.ExecAtCommit] in write-behind mode. after,
// if set, runs once the row is written.
func (s *suite) handler(t *testing.T, consumer string, rec *recorder, logger watermill.LoggerAdapter,
	after func(msg *message.Message) error,
) message.HandlerFunc {
	t.Helper()
	config := s.options.Config
	config.Consumer = consumer
	config.Key = nil
	mw, err := inbox.NewMiddleware(s.Store, config, logger)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + s.Business + " (consumer, msg_key) VALUES (?, ?)"
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		var err error
		r, inTx := s.InTx(ctx)
		switch {
		case !inTx && !s.writeBehind():
			return nil, errors.New("no inbox transaction in the handler's context")
		case s.queues():
			err = inbox.ExecAtCommit(ctx, s.placeholders(insert), consumer, msg.UUID)
		default:
			err = r.Exec(ctx, insert, consumer, msg.UUID)
		}
		if err == nil && after != nil {
			err = after(msg)
		}
		if rec != nil {
			rec.ran(msg.UUID, err)
		}
		return nil, err
	})
}

func (s *suite) rows(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	n, err := s.Direct.Count(context.Background(), "SELECT COUNT(*) FROM "+table+" "+where, args...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (s *suite) invoices(t *testing.T, consumer, key string) int {
	return s.rows(t, s.Business, "WHERE consumer = ? AND msg_key = ?", consumer, key)
}

func (s *suite) claims(t *testing.T, consumer, key string) int {
	return s.rows(t, s.Table, "WHERE consumer = ? AND message_id = ?", consumer, key)
}

package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/inboxkit/watermill-inbox"
)

// errDatabaseDown stands for an error a store reports as the infrastructure's.
var errDatabaseDown = errors.New("connection refused")

// classifyingStore is a fakeStore that reports errDatabaseDown (wherever it is wrapped) as
// a failure of the infrastructure, as sqlinbox.Store.IsTransient does for its errors.
type classifyingStore struct{ *fakeStore }

func (classifyingStore) IsTransient(err error) bool { return errors.Is(err, errDatabaseDown) }

type typedDown struct{ addr string }

func (e *typedDown) Error() string { return "dial " + e.addr + ": refused" }
func (e *typedDown) Unwrap() error { return errDatabaseDown }

func TestPoisonous(t *testing.T) {
	permanent := errors.New("malformed payload")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"an error", permanent, true},
		{"a wrapped error", fmt.Errorf("handler: %w", permanent), true},
		{"ErrInvalidKey", fmt.Errorf("%w: empty", inbox.ErrInvalidKey), true},
		{"a fingerprint mismatch", &inbox.FingerprintMismatchError{}, true},
		{"a cancelled delivery", context.Canceled, false},
		{"a wrapped cancellation", fmt.Errorf("publish: %w", context.Canceled), false},
		{"a deadline", context.DeadlineExceeded, true}, // the middleware marks it if its store reports it
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inbox.Poisonous(tt.err); got != tt.want {
				t.Errorf("Poisonous(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestMiddlewareMarksWhatItsStoreReports runs each failure through the middleware on a store
// that reports errDatabaseDown as the infrastructure's: only those come out not poisonous,
// and errors.Is and errors.As still find what the mark wraps.
func TestMiddlewareMarksWhatItsStoreReports(t *testing.T) {
	permanent := errors.New("payload refused")
	tests := []struct {
		name      string
		claimErr  error
		commitErr error
		rbErr     error
		handler   error
		poisonous bool
	}{
		{name: "the claim fails", claimErr: fmt.Errorf("begin: %w", errDatabaseDown)},
		{name: "the commit fails", commitErr: &typedDown{"db:5432"}},
		{name: "a handler's statement on the inbox transaction", handler: fmt.Errorf("insert invoice: %w", errDatabaseDown)},
		{name: "a handler's permanent error", handler: permanent, poisonous: true},
		{name: "a handler's permanent error, its rollback failing", handler: permanent, rbErr: errDatabaseDown},
		{name: "a store error the store does not report", commitErr: permanent, poisonous: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := classifyingStore{newFakeStore()}
			store.claimErr, store.commitErr, store.rbErr = tt.claimErr, tt.commitErr, tt.rbErr
			handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
				return nil, tt.handler
			})
			_, err := handler(message.NewMessage("order-1", nil))
			if err == nil {
				t.Fatal("the delivery succeeded, want an error")
			}
			if got := inbox.Poisonous(err); got != tt.poisonous {
				t.Errorf("Poisonous(%v) = %v, want %v", err, got, tt.poisonous)
			}
			for _, want := range []error{tt.claimErr, tt.commitErr, tt.rbErr, tt.handler} {
				if want != nil && !errors.Is(err, want) {
					t.Errorf("errors.Is(%v, %v) = false: the mark hides what it wraps", err, want)
				}
			}
			var typed *typedDown
			if tt.commitErr != nil && errors.As(tt.commitErr, &typed) && !errors.As(err, &typed) {
				t.Errorf("errors.As(%v, *typedDown) = false: the mark hides what it wraps", err)
			}
		})
	}
}

// TestStoreWithoutClassifierMarksNothing: a store that cannot tell marks nothing, so every
// failure goes to the poison queue, as with Watermill's PoisonQueue.
func TestStoreWithoutClassifierMarksNothing(t *testing.T) {
	store := newFakeStore()
	store.claimErr = errDatabaseDown
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); !inbox.Poisonous(err) {
		t.Errorf("Poisonous(%v) = false on a store without IsTransient, want true", err)
	}
}

// poisonSink records what a poison queue publishes.
type poisonSink struct {
	mu       sync.Mutex
	messages []*message.Message
}

func (p *poisonSink) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.messages = append(p.messages, msgs...)
	return nil
}

func (p *poisonSink) Close() error { return nil }

func (p *poisonSink) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.messages)
}

// stack is the recommended stack around h on store, with Retry's intervals shortened so
// that the test waits milliseconds.
func stack(t *testing.T, store inbox.Store, logger watermill.LoggerAdapter, sink *poisonSink, h message.HandlerFunc) message.HandlerFunc {
	t.Helper()
	return stackWaiting(t, time.Millisecond, store, logger, sink, h)
}

func stackWaiting(t *testing.T, wait time.Duration, store inbox.Store, logger watermill.LoggerAdapter, sink *poisonSink, h message.HandlerFunc) message.HandlerFunc {
	t.Helper()
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	poisonQueue, err := middleware.PoisonQueueWithFilter(sink, "orders_poison", inbox.Poisonous)
	if err != nil {
		t.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: math.MaxInt32, InitialInterval: wait, Multiplier: 2,
		MaxInterval: 4 * wait, ShouldRetry: inbox.ShouldRetry(3, logger), Logger: logger}
	return poisonQueue(retry.Middleware(middleware.Recoverer(inboxMiddleware(h))))
}

// An infrastructure failure is retried for as long as it lasts and then processed, never
// poisoned; the message's own failure is retried 3 times and poisoned; each failure is logged
// once, at error level.
func TestShouldRetryTellsTheFailuresApart(t *testing.T) {
	permanent := errors.New("payload refused")
	tests := []struct {
		name           string
		claimFailures  int   // claims that fail with errDatabaseDown first
		handlerErr     error // what the handler returns every time
		runs, poisoned int
	}{
		{name: "the database away for 20 attempts", claimFailures: 20, runs: 1},
		{name: "the message's own failure", handlerErr: permanent, runs: 4, poisoned: 1},
		{name: "a handler's statement deadlocking", handlerErr: fmt.Errorf("insert: %w", errDatabaseDown), runs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &flakyStore{classifyingStore: classifyingStore{newFakeStore()}, failures: tt.claimFailures}
			logger := watermill.NewCaptureLogger()
			sink := &poisonSink{}
			runs := 0
			h := stack(t, store, logger, sink, func(*message.Message) ([]*message.Message, error) {
				runs++
				if tt.handlerErr != nil && errors.Is(tt.handlerErr, errDatabaseDown) && runs > 10 {
					return nil, nil // the deadlock resolved itself
				}
				return nil, tt.handlerErr
			})
			_, err := h(message.NewMessage("order-1", nil))
			if err != nil {
				t.Fatalf("the stack returned %v, want nil (processed or poisoned)", err)
			}
			if tt.runs == 0 {
				tt.runs = 11
			}
			if runs != tt.runs || sink.count() != tt.poisoned {
				t.Errorf("handler ran %d times, %d poisoned; want %d and %d", runs, sink.count(), tt.runs, tt.poisoned)
			}
			failures := tt.claimFailures + runs - 1
			if tt.poisoned > 0 {
				failures++
			}
			if got := len(logger.Captured()[watermill.ErrorLogLevel]); got != failures {
				t.Errorf("%d failures logged at error level, want %d: one for each", got, failures)
			}
		})
	}
}

// flakyStore fails its first failures claims with errDatabaseDown, and tells failed of each.
type flakyStore struct {
	classifyingStore
	mu       sync.Mutex
	failures int
	failed   chan struct{} // nil: tells nobody
}

func (s *flakyStore) Claim(ctx context.Context, c inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	s.mu.Lock()
	fail := s.failures > 0
	s.failures--
	s.mu.Unlock()
	if fail {
		if s.failed != nil {
			s.failed <- struct{}{}
		}
		return nil, nil, fmt.Errorf("acquire: %w", errDatabaseDown)
	}
	return s.classifyingStore.Claim(ctx, c)
}

// The router closing while Retry waits ends the wait with context.Canceled, which the poison
// queue leaves alone: the message is nacked, for a redelivery after the restart.
func TestRetryStopsWhenTheMessageContextEnds(t *testing.T) {
	store := &flakyStore{classifyingStore: classifyingStore{newFakeStore()}, failures: math.MaxInt32, failed: make(chan struct{}, 1)}
	sink := &poisonSink{}
	h := stackWaiting(t, time.Hour, store, nil, sink, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	ctx, cancel := context.WithCancel(context.Background())
	msg := message.NewMessage("order-1", nil)
	msg.SetContext(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := h(msg)
		done <- err
	}()
	<-store.failed // the first claim failed: Retry now waits an hour before the next
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || sink.count() != 0 {
			t.Errorf("err = %v with %d poisoned, want context.Canceled and none", err, sink.count())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Retry went on after the message context ended")
	}
}

// A handler that overran middleware.Timeout inside the inbox fails on its own, even when the
// statement the deadline cut off failed with an error the store reports: Timeout bounds the
// handler, and its retries end in the poison queue.
func TestHandlerThatOverranItsTimeoutIsPoisonous(t *testing.T) {
	store := classifyingStore{newFakeStore()}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(middleware.Timeout(time.Millisecond)(func(msg *message.Message) ([]*message.Message, error) {
		<-msg.Context().Done()
		return nil, fmt.Errorf("insert: %w", errors.Join(msg.Context().Err(), errDatabaseDown))
	}))
	_, err = h(message.NewMessage("order-1", nil))
	if !errors.Is(err, context.DeadlineExceeded) || !inbox.Poisonous(err) {
		t.Errorf("err = %v, Poisonous = %v; want the deadline, poisonous", err, inbox.Poisonous(err))
	}
}

// judgingStore is a classifyingStore whose transactions judge the handler's error themselves,
// as sqlinbox's do: only errDatabaseDown met on the transaction (errMetOnTx) is the
// infrastructure's, whatever the store's IsTransient says of its type.
type judgingStore struct{ classifyingStore }

// errMetOnTx stands for an error the database raised on the claim's transaction.
var errMetOnTx = fmt.Errorf("deadlock on the inbox transaction: %w", errDatabaseDown)

type judgingTx struct{ *fakeTx }

func (judgingTx) IsTransient(err error) bool { return errors.Is(err, errMetOnTx) }

func (s judgingStore) Claim(ctx context.Context, c inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	tx, prior, err := s.classifyingStore.Claim(ctx, c)
	if tx != nil {
		tx = judgingTx{tx.(*fakeTx)}
	}
	return tx, prior, err
}

// A handler's error is judged where it happened: by the claim's transaction where it can
// judge (a deadlock met on it is the infrastructure's, the same type elsewhere is not); a
// deadline or a cancellation of the handler's own is the message's whatever it wraps; a
// team's own error marked with inbox.Infrastructure is the infrastructure's.
func TestHandlerErrorsAreJudgedByWhereTheyHappened(t *testing.T) {
	ownDeadline := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		<-ctx.Done()
		return fmt.Errorf("%w: %w", errDatabaseDown, ctx.Err())
	}
	ownCancel := func() error {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return fmt.Errorf("call the warehouse: %w", ctx.Err())
	}
	for _, tt := range []struct {
		name      string
		store     inbox.Store
		handler   func() error
		poisonous bool
	}{
		{"met on the transaction, which judges", judgingStore{classifyingStore{newFakeStore()}}, func() error { return errMetOnTx }, false},
		{"the same type elsewhere, the transaction judging", judgingStore{classifyingStore{newFakeStore()}},
			func() error { return fmt.Errorf("another service: %w", errDatabaseDown) }, true},
		{"the same type, a store whose transaction does not judge", classifyingStore{newFakeStore()},
			func() error { return fmt.Errorf("another service: %w", errDatabaseDown) }, false},
		{"the handler's own deadline", classifyingStore{newFakeStore()}, ownDeadline, true},
		{"the handler's own cancellation", classifyingStore{newFakeStore()}, ownCancel, true},
		{"marked with Infrastructure", newFakeStore(), func() error { return inbox.Infrastructure(errors.New("the ledger is away")) }, false},
		{"marked with Infrastructure, the transaction judging", judgingStore{classifyingStore{newFakeStore()}},
			func() error { return inbox.Infrastructure(errors.New("the ledger is away")) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.handler()
			handler := newHandler(t, tt.store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
				return nil, want
			})
			_, err := handler(message.NewMessage("order-1", nil))
			if !errors.Is(err, want) {
				t.Fatalf("the middleware's error %v does not wrap the handler's", err)
			}
			if got := inbox.Poisonous(err); got != tt.poisonous {
				t.Errorf("Poisonous(%v) = %v, want %v", err, got, tt.poisonous)
			}
		})
	}
	if inbox.Infrastructure(nil) != nil {
		t.Error("Infrastructure(nil) is not nil")
	}
}

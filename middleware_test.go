package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

// fakeStore keeps committed claims in memory. It is only for the middleware's own logic;
// the real stores are tested against real databases in the integration module.
type fakeStore struct {
	mu        sync.Mutex
	committed map[[2]string]*inbox.Record
	writes    map[[2]string][]string // the statements queued with each committed claim
	claims    int
	rollbacks int
	claimErr  error
	commitErr error
	rbErr     error
}

type fakeTx struct {
	store       *fakeStore
	key         [2]string
	fingerprint []byte
	ended       bool
	queued      []string
}

func (t *fakeTx) ExecAtCommit(sql string, _ ...any) { t.queued = append(t.queued, sql) }

func newFakeStore() *fakeStore {
	return &fakeStore{committed: map[[2]string]*inbox.Record{}, writes: map[[2]string][]string{}}
}

func (s *fakeStore) Claim(_ context.Context, c inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	if s.claimErr != nil {
		return nil, nil, s.claimErr
	}
	k := [2]string{c.Consumer, c.Key}
	if prior := s.committed[k]; prior != nil {
		return nil, prior, nil
	}
	return &fakeTx{store: s, key: k, fingerprint: c.Fingerprint}, nil, nil
}

func (t *fakeTx) Handle() any { return t }

func (t *fakeTx) Commit(_ context.Context, produced []byte) error {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.ended = true
	if t.store.commitErr != nil {
		return t.store.commitErr
	}
	t.store.committed[t.key] = &inbox.Record{Fingerprint: t.fingerprint, Produced: produced}
	t.store.writes[t.key] = t.queued
	return nil
}

func (t *fakeTx) Rollback(context.Context) error {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.ended = true
	t.store.rollbacks++
	return t.store.rbErr
}

func (s *fakeStore) isCommitted(consumer, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed[[2]string{consumer, key}] != nil
}

func newHandler(t *testing.T, store inbox.Store, config inbox.Config, logger watermill.LoggerAdapter, h message.HandlerFunc) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(store, config, logger)
	if err != nil {
		t.Fatalf("NewMiddleware: %v", err)
	}
	return mw(h)
}

func TestFirstDeliveryCommitsWithTxAndKeyInContext(t *testing.T) {
	store := newFakeStore()
	var sawTx *fakeTx
	var sawKey string
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[*fakeTx](msg.Context())
		if !ok {
			t.Error("TxFromContext: no transaction in the handler's context")
		}
		if _, ok := inbox.TxFromContext[*strings.Builder](msg.Context()); ok {
			t.Error("TxFromContext with the wrong type: ok = true, want false")
		}
		sawTx = tx
		sawKey, _ = inbox.KeyFromContext(msg.Context())
		return nil, nil
	})

	msg := message.NewMessage("order-1", nil)
	if _, err := handler(msg); err != nil {
		t.Fatalf("handler: %v", err)
	}
	if !store.isCommitted("billing", "order-1") {
		t.Error("claim not committed")
	}
	if sawTx == nil || !sawTx.ended {
		t.Error("the handler did not see the claim's transaction, or it was not ended")
	}
	if sawKey != "order-1" {
		t.Errorf("KeyFromContext = %q, want order-1", sawKey)
	}
	if _, ok := inbox.TxFromContext[*fakeTx](msg.Context()); ok {
		t.Error("the finished transaction is still in the message context after the middleware returned")
	}
}

func TestDuplicateSkipsHandlerAndIsNotLoggedAsError(t *testing.T) {
	store := newFakeStore()
	logger := watermill.NewCaptureLogger()
	calls := 0
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, logger, func(*message.Message) ([]*message.Message, error) {
		calls++
		return nil, nil
	})

	for range 3 {
		if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
			t.Fatalf("handler: %v", err)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
	captured := logger.Captured()
	if len(captured[watermill.ErrorLogLevel]) != 0 {
		t.Errorf("duplicates logged as errors: %v", captured[watermill.ErrorLogLevel])
	}
	if got := len(captured[watermill.DebugLogLevel]); got != 2 {
		t.Errorf("%d debug logs, want one per duplicate (2)", got)
	}
}

func TestHandlerErrorRollsBackAndRedeliveryRunsAgain(t *testing.T) {
	store := newFakeStore()
	failures := 1
	calls := 0
	errBusiness := errors.New("payment provider down")
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		calls++
		if failures > 0 {
			failures--
			return nil, errBusiness
		}
		return nil, nil
	})

	if _, err := handler(message.NewMessage("order-1", nil)); !errors.Is(err, errBusiness) {
		t.Fatalf("first delivery: err = %v, want the handler's error", err)
	}
	if store.isCommitted("billing", "order-1") || store.rollbacks != 1 {
		t.Fatalf("after a handler error: committed=%v rollbacks=%d, want false and 1",
			store.isCommitted("billing", "order-1"), store.rollbacks)
	}
	if _, err := handler(message.NewMessage("order-1", nil)); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if calls != 2 || !store.isCommitted("billing", "order-1") {
		t.Errorf("calls=%d committed=%v, want 2 and true", calls, store.isCommitted("billing", "order-1"))
	}
}

func TestRollbackFailureIsJoinedToHandlerError(t *testing.T) {
	store := newFakeStore()
	store.rbErr = errors.New("connection reset")
	errBusiness := errors.New("business")
	handler := newHandler(t, store, inbox.Config{Consumer: "c"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, errBusiness
	})
	_, err := handler(message.NewMessage("k", nil))
	if !errors.Is(err, errBusiness) || !errors.Is(err, store.rbErr) {
		t.Errorf("err = %v, want both the handler's and the rollback's error", err)
	}
}

func TestHandlerPanicRollsBackBeforeThePanicContinues(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		panic("boom")
	})

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_, _ = handler(message.NewMessage("order-1", nil))
	}()
	if store.rollbacks != 1 || store.isCommitted("billing", "order-1") {
		t.Errorf("rollbacks=%d committed=%v, want 1 and false", store.rollbacks, store.isCommitted("billing", "order-1"))
	}
}

func TestCommitFailureIsAnError(t *testing.T) {
	store := newFakeStore()
	store.commitErr = errors.New("connection lost during COMMIT")
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); !errors.Is(err, store.commitErr) {
		t.Errorf("err = %v, want the commit error", err)
	}
}

func TestClaimFailureIsAnErrorAndSkipsHandler(t *testing.T) {
	store := newFakeStore()
	store.claimErr = errors.New("database unreachable")
	called := false
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		called = true
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); !errors.Is(err, store.claimErr) {
		t.Errorf("err = %v, want the claim error", err)
	}
	if called {
		t.Error("handler ran without a claim")
	}
}

func TestBadKeysAreErrorsAndNeverClaimed(t *testing.T) {
	errKeyFunc := errors.New("no order id in metadata")
	tests := []struct {
		name string
		key  func(*message.Message) (string, error)
		want error
	}{
		{"empty", func(*message.Message) (string, error) { return "", nil }, inbox.ErrInvalidKey},
		{"one byte too long", func(*message.Message) (string, error) { return strings.Repeat("k", inbox.MaxKeyLength+1), nil }, inbox.ErrInvalidKey},
		{"10 KB", func(*message.Message) (string, error) { return strings.Repeat("k", 10<<10), nil }, inbox.ErrInvalidKey},
		{"invalid UTF-8", func(*message.Message) (string, error) { return "order-\xff", nil }, inbox.ErrInvalidKey},
		{"NUL byte", func(*message.Message) (string, error) { return "order\x00-1", nil }, inbox.ErrInvalidKey},
		{"newline", func(*message.Message) (string, error) { return "order-1\n[watermill] forged", nil }, inbox.ErrInvalidKey},
		{"tab", func(*message.Message) (string, error) { return "order\t1", nil }, inbox.ErrInvalidKey},
		{"ESC", func(*message.Message) (string, error) { return "order\x1b]0;title\x07", nil }, inbox.ErrInvalidKey},
		{"DEL", func(*message.Message) (string, error) { return "order\x7f", nil }, inbox.ErrInvalidKey},
		{"C1 CSI", func(*message.Message) (string, error) { return "order\u009b2J", nil }, inbox.ErrInvalidKey},
		{"key function error", func(*message.Message) (string, error) { return "", errKeyFunc }, errKeyFunc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			called := false
			handler := newHandler(t, store, inbox.Config{Consumer: "billing", Key: tt.key}, nil, func(*message.Message) ([]*message.Message, error) {
				called = true
				return nil, nil
			})
			if _, err := handler(message.NewMessage("uuid", nil)); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if called || store.claims != 0 {
				t.Errorf("handler called=%v, claims=%d; want neither", called, store.claims)
			}
		})
	}
}

func TestLongestKeyIsAccepted(t *testing.T) {
	store := newFakeStore()
	key := strings.Repeat("é", inbox.MaxKeyLength/2) + "x" // exactly MaxKeyLength bytes
	handler := newHandler(t, store, inbox.Config{Consumer: "c", Key: func(*message.Message) (string, error) { return key, nil }}, nil,
		func(*message.Message) ([]*message.Message, error) { return nil, nil })
	if _, err := handler(message.NewMessage("uuid", nil)); err != nil {
		t.Fatalf("key of %d bytes: %v", len(key), err)
	}
	if !store.isCommitted("c", key) {
		t.Error("not committed")
	}
}

func TestEmptyUUIDIsErrEmptyKeyByDefault(t *testing.T) {
	store := newFakeStore()
	handler := newHandler(t, store, inbox.Config{Consumer: "billing"}, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("", nil)); !errors.Is(err, inbox.ErrInvalidKey) {
		t.Errorf("err = %v, want ErrInvalidKey", err)
	}
}

func TestNoConsumerIsRefusedByTheConstructor(t *testing.T) {
	_, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{}, nil)
	if !errors.Is(err, inbox.ErrNoConsumer) {
		t.Fatalf("err = %v, want ErrNoConsumer", err)
	}
	// The error names the settings that fix it.
	for _, want := range []string{"Config.Consumer", "ConsumerByHandler"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestConsumerByHandlerOutsideARouterIsErrNoConsumer(t *testing.T) {
	store := newFakeStore()
	config := inbox.Config{ConsumerByHandler: map[string]string{"billing": "billing"}}
	handler := newHandler(t, store, config, nil, func(*message.Message) ([]*message.Message, error) {
		return nil, nil
	})
	if _, err := handler(message.NewMessage("order-1", nil)); !errors.Is(err, inbox.ErrNoConsumer) {
		t.Errorf("err = %v, want ErrNoConsumer", err)
	}
	if store.claims != 0 {
		t.Error("claimed without a consumer")
	}
}

func TestConstructorRejectsBadConfig(t *testing.T) {
	if _, err := inbox.NewMiddleware(nil, inbox.Config{Consumer: "billing"}, nil); err == nil || !strings.Contains(err.Error(), "store is nil") {
		t.Errorf("nil store: err = %v, want one saying the store is nil", err)
	}
	long := strings.Repeat("c", inbox.MaxConsumerLength+1)
	if _, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{Consumer: long}, nil); err == nil || !strings.Contains(err.Error(), "inbox: consumer name") {
		t.Errorf("long consumer: err = %v, want a refusal of the consumer name", err)
	}
	if _, err := inbox.NewMiddleware(newFakeStore(), inbox.Config{Consumer: "bad\xff"}, nil); err == nil || !strings.Contains(err.Error(), "inbox: consumer name") {
		t.Errorf("invalid UTF-8 consumer: err = %v, want a refusal of the consumer name", err)
	}
	for _, consumer := range []string{"evil\x1b]0;TITLE\x07\x1b[2J", "billing\n", "billing\x7f", "billing\u0085"} {
		for _, config := range []inbox.Config{{Consumer: consumer}, {ConsumerByHandler: map[string]string{"h": consumer}}} {
			_, err := inbox.NewMiddleware(newFakeStore(), config, nil)
			if err == nil || !strings.Contains(err.Error(), "control character") {
				t.Errorf("consumer %q: err = %v, want a refusal naming the control character", consumer, err)
			}
			// The refusal quotes the name: it cannot drive the terminal it is printed on.
			if err != nil && strings.ContainsAny(err.Error(), "\x1b\n\x07\x7f\u0085") {
				t.Errorf("consumer %q: the error holds the control characters raw: %q", consumer, err)
			}
		}
	}
}

func TestContextHelpersOutsideTheMiddleware(t *testing.T) {
	if _, ok := inbox.TxFromContext[any](context.Background()); ok {
		t.Error("TxFromContext outside the middleware: ok = true")
	}
	if _, ok := inbox.KeyFromContext(context.Background()); ok {
		t.Error("KeyFromContext outside the middleware: ok = true")
	}
}

// ConsumerByHandler maps each router handler to its consumer: fan-out handlers (billing,
// shipping) each process a message once, competing handlers (billing-0, billing-1) share
// one consumer, and a handler missing from the map (renamed, say) is refused before any
// claim.
func TestConsumerByHandler(t *testing.T) {
	store := newFakeStore()
	mw, err := inbox.NewMiddleware(store, inbox.Config{ConsumerByHandler: map[string]string{
		"billing": "billing", "shipping": "shipping", "billing-0": "invoicing", "billing-1": "invoicing",
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	type ran struct{ handler, uuid string }
	done := make(chan ran, 16)
	failed := make(chan error, 16)
	// Outside the inbox: a failure is reported and acked, so the test sees the error rather
	// than redeliveries.
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			if err != nil {
				failed <- err
				return nil, nil
			}
			return produced, nil
		}
	}, mw)
	handle := func(msg *message.Message) error {
		done <- ran{message.HandlerNameFromCtx(msg.Context()), msg.UUID}
		return nil
	}
	for _, name := range []string{"billing", "shipping"} {
		router.AddConsumerHandler(name, "orders", pubSub, handle)
	}
	// Two competing handlers, each given one copy of the same message.
	for _, name := range []string{"billing-0", "billing-1"} {
		router.AddConsumerHandler(name, "invoices-"+name, pubSub, handle)
	}
	router.AddConsumerHandler("billing-renamed", "renamed", pubSub, handle)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	t.Cleanup(func() { _ = router.Close() })

	for _, topic := range []string{"orders", "invoices-billing-0", "renamed"} {
		if err := pubSub.Publish(topic, message.NewMessage("order-1", nil)); err != nil {
			t.Fatal(err)
		}
	}
	waitCommitted := func(consumer string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !store.isCommitted(consumer, "order-1") {
			if time.Now().After(deadline) {
				t.Fatalf("no claim committed for consumer %q", consumer)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCommitted("invoicing") // the first competing copy is in before the second is sent
	if err := pubSub.Publish("invoices-billing-1", message.NewMessage("order-1", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, inbox.ErrNoConsumer) || !strings.Contains(err.Error(), `"billing-renamed"`) {
			t.Errorf("renamed handler: err = %v, want ErrNoConsumer naming the handler", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the renamed handler's message was not refused")
	}
	runs := map[string]int{}
	for len(runs) < 3 {
		select {
		case r := <-done:
			runs[r.handler]++
		case <-time.After(10 * time.Second):
			t.Fatalf("handlers ran %v, want billing, shipping and one of billing-0/1", runs)
		}
	}
	waitCommitted("billing")
	waitCommitted("shipping")
	// Four claims: billing, shipping and both competing copies. Closing the router waits
	// for the handlers in flight, so whatever the second copy ran is in done after it.
	deadline := time.Now().Add(10 * time.Second)
	for store.claimCount() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims, want 4", store.claimCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	close(done)
	for r := range done {
		runs[r.handler]++
	}
	if runs["billing"] != 1 || runs["shipping"] != 1 || runs["billing-0"]+runs["billing-1"] != 1 || runs["billing-renamed"] != 0 {
		t.Errorf("runs %v: want billing 1, shipping 1, billing-0 and billing-1 together 1, billing-renamed 0", runs)
	}
}

func (s *fakeStore) claimCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

func (s *fakeStore) committedWrites(consumer, key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[[2]string{consumer, key}]
}

// A message UUID cannot forge a log line: under KeyFromMetadata the UUID is not the key, so
// it is not refused, and the middleware quotes it in its log fields (Watermill's
// StdLoggerAdapter writes field values as they are).
func TestControlCharactersInTheUUIDDoNotForgeLogLines(t *testing.T) {
	var out strings.Builder
	logger := watermill.NewStdLoggerWithOut(&out, true, false)
	config := inbox.Config{Consumer: "billing", Key: inbox.KeyFromMetadata("order_id"), OnFingerprintMismatch: inbox.AckMismatch}
	handler := newHandler(t, newFakeStore(), config, logger, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	forged := "x\n[watermill] 2026/12/02 00:00:00.000000 auth.go:1: level=INFO  msg=\"admin login ok\" \x1b[2J"
	for _, payload := range []string{"a", "a", "b"} { // first, duplicate (debug line), mismatch (error line)
		msg := message.NewMessage(forged, []byte(payload))
		msg.Metadata.Set("order_id", "order-1")
		if _, err := handler(msg); err != nil {
			t.Fatal(err)
		}
	}
	logged := out.String()
	if !strings.Contains(logged, "duplicate message skipped") || !strings.Contains(logged, "different payload acked") {
		t.Fatalf("the duplicate and the mismatch were not logged:\n%s", logged)
	}
	for _, line := range strings.Split(strings.TrimSuffix(logged, "\n"), "\n") {
		if !strings.Contains(strings.ToLower(line), `msg="inbox: `) {
			t.Errorf("a line the middleware did not write: %q", line)
		}
	}
	if strings.Contains(logged, "\x1b") {
		t.Errorf("an escape sequence reached the log raw:\n%q", logged)
	}
}

package integration

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// suiteStores are the stores the conformance suite (package inboxtest) runs on: every
// backend, and two variants that only the suite needs.
func suiteStores() map[string]newBackend {
	stores := maps.Clone(backends)
	// clientFoundRows=true makes MySQL count a row that an upsert found but did not change
	// as affected: a claim that read the affected-row count took a duplicate for a new one.
	stores["database-sql/mariadb-clientFoundRows"] = func(t *testing.T) *backend {
		return mysqlBackendWith(t, "clientFoundRows=true", nil)
	}
	return stores
}

func TestStoreConformance(t *testing.T) {
	runSuite(t, inboxtest.Options{})
}

// The suite again with the handler run before the claim (inbox.Config.WriteBehind): on pgx
// the store's one-batch path, elsewhere claim, queued writes and commit in turn.
func TestStoreConformanceWriteBehind(t *testing.T) {
	runSuite(t, inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
}

func runSuite(t *testing.T, options inboxtest.Options) {
	stores := suiteStores()
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness { return stores[name](t).harness() }, options)
		})
	}
}

// harness returns b as the conformance suite sees it.
func (b *backend) harness() *inboxtest.Harness {
	queued := maps.Clone(b.queuedCommitFaults)
	if queued == nil {
		queued = map[string]inbox.Statement{}
	}
	// A queued statement that fails makes the commit fail on every database.
	queued["queued statement fails before COMMIT"] = inbox.Statement{
		SQL: "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (NULL, NULL)",
	}
	return &inboxtest.Harness{
		Store:    b.store,
		Table:    b.table,
		Business: b.business,
		Direct:   suiteRunner{b.direct},
		InTx: func(ctx context.Context) (inboxtest.Runner, bool) {
			r, ok := b.inTx(ctx)
			return suiteRunner{r}, ok
		},
		Placeholders: b.placeholders,
		NewStore: func(table string) (inbox.Store, error) {
			return b.newStore(sqlinbox.Config{Table: table})
		},
		CommitFaults:       b.commitFaults,
		QueuedCommitFaults: queued,
		Outage:             b.outage,
		Retriable:          b.retriable,
	}
}

// suiteRunner is a runner as the suite's Runner.
type suiteRunner struct{ r runner }

func (s suiteRunner) Exec(ctx context.Context, query string, args ...any) error {
	return s.r.exec(ctx, query, args...)
}

func (s suiteRunner) Count(ctx context.Context, query string, args ...any) (int, error) {
	return s.r.count(ctx, query, args...)
}

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
// message. before, if set, runs first in the transaction; after runs once the row is written.
func (b *backend) handler(t *testing.T, consumer string, rec *recorder, logger watermill.LoggerAdapter,
	after func(msg *message.Message) error,
) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer}, logger)
	if err != nil {
		t.Fatal(err)
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		r, ok := b.inTx(ctx)
		if !ok {
			return nil, errors.New("no inbox transaction in the handler's context")
		}
		err := r.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", consumer, msg.UUID)
		if err == nil && after != nil {
			err = after(msg)
		}
		if rec != nil {
			rec.ran(msg.UUID, err)
		}
		return nil, err
	})
}

func deliver(ctx context.Context, h message.HandlerFunc, key string) error {
	msg := message.NewMessage(key, nil)
	msg.SetContext(ctx)
	_, err := h(msg)
	return err
}

// deliverUntilAcked delivers key again after each error, as a broker redelivers a nacked
// message, and returns the errors seen before the ack.
func deliverUntilAcked(t *testing.T, h message.HandlerFunc, key string) []error {
	t.Helper()
	var nacks []error
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := deliver(context.Background(), h, key)
		if err == nil {
			return nacks
		}
		nacks = append(nacks, err)
		if time.Now().After(deadline) {
			t.Errorf("message %q still nacked after %d deliveries: %v", key, len(nacks), err)
			return nacks
		}
		time.Sleep(time.Duration(len(nacks)) * 5 * time.Millisecond) // the broker's redelivery backoff
	}
}

func (b *backend) rows(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	n, err := b.direct.count(context.Background(), "SELECT COUNT(*) FROM "+table+" "+where, args...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *backend) invoices(t *testing.T, consumer, key string) int {
	return b.rows(t, b.business, "WHERE consumer = ? AND msg_key = ?", consumer, key)
}

func (b *backend) claims(t *testing.T, consumer, key string) int {
	return b.rows(t, b.table, "WHERE consumer = ? AND message_id = ?", consumer, key)
}

func wantRows(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d rows, want %d", what, got, want)
	}
}

// checkNacksRetriable fails on any nack that is not a race the database resolved with an
// error (deadlock, lock timeout, busy): with no faults injected, nothing else may fail.
func checkNacksRetriable(t *testing.T, b *backend, nacks []error) {
	t.Helper()
	for _, err := range nacks {
		if !b.retriable(err) {
			t.Errorf("unexpected nack: %v", err)
			return
		}
	}
}

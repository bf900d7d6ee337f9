package integration

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

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
		return mysqlBackendWith(t, "clientFoundRows=true", false)
	}
	return stores
}

func TestStoreConformance(t *testing.T) {
	runSuite(t, nil)
}

// The suite again with the handler run before the claim (inbox.Config.WriteBehind): on pgx
// the store's one-batch path, elsewhere claim, queued writes and commit in turn.
func TestStoreConformanceWriteBehind(t *testing.T) {
	runSuite(t, &inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
}

// The suite again with the handlers queueing their writes in the claim-first mode: the
// statements travel with COMMIT (one batch on pgx, one multi-statement request on MariaDB's multi-statement store).
func TestStoreConformanceQueued(t *testing.T) {
	runSuite(t, &inboxtest.Options{ExecAtCommit: true})
}

// runSuite runs the conformance suite with options on every suite store, one store after
// another, and t beside the package's other parallel tests.
func runSuite(t *testing.T, options *inboxtest.Options) {
	t.Parallel()
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

// handler returns the inbox-wrapped handler for consumer that writes one business row per
// message; after, if set, runs once the row is written.
func (b *backend) handler(t *testing.T, consumer string, logger watermill.LoggerAdapter,
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
		return nil, err
	})
}

// The suite's delivery and row-count helpers, for the tests of this package too.
var (
	deliver           = inboxtest.Deliver
	deliverUntilAcked = inboxtest.DeliverUntilAcked
	wantRows          = inboxtest.WantRows
)

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

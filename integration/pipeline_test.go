package integration

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The store made by sqlinbox.NewPgxPipeline: write-behind requests of concurrent messages in
// one pipeline, a Sync after each. Here: the conformance suite, the handler kit and
// PgBouncer; the storms are in pipeline_storm_test.go.

// pipelineBackend is pgxBackend on a store made by NewPgxPipeline with pipeline.
func pipelineBackend(t *testing.T, pipeline sqlinbox.PipelineConfig) *backend {
	return pipelineBackendAt(t, testenv.PostgresURL(t), pipeline)
}

// pipelineBackendAt is pipelineBackend with the store reaching PostgreSQL at storeURL (through
// the proxy that outage cuts), such as a pooler's; direct still reaches it directly.
func pipelineBackendAt(t *testing.T, storeURL string, pipeline sqlinbox.PipelineConfig, configure ...func(*pgxpool.Config)) *backend {
	ctx := context.Background()
	directURL := testenv.PostgresURL(t)
	proxy := startProxy(t, hostOf(t, storeURL))
	direct := openPgxPool(t, directURL)
	proxied := openPgxPool(t, withHost(t, storeURL, proxy.Addr()), configure...)

	table := testenv.Name("inbox")
	store, err := sqlinbox.NewPgxPipeline(proxied, sqlinbox.Config{Table: table}, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{
		store:  store,
		table:  table,
		direct: pgxRunner{direct},
		inTx: func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			return pgxRunner{tx}, ok
		},
		newStore: func(config sqlinbox.Config) (inbox.Store, error) {
			return sqlinbox.NewPgxPipeline(proxied, config, pipeline)
		},
		outage:       func() func() { proxy.Cut(); return proxy.Restore },
		retriable:    func(error) bool { return false },
		placeholders: inboxtest.DollarPlaceholders,
		dialect:      sqlinbox.Postgres{},
		retentionSQL: postgresRetentionSQL,
		driver:       "pgx",
		dsn:          directURL,
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	postgresFaults(t, b)
	createBusinessTable(t, b)
	return b
}

// The conformance suite on the pipelined store: in write-behind mode, its own path, with the
// default lanes and with one lane (every message that finds it busy waits for the next
// pipeline, so the suite's concurrent cases send pipelines of many messages); and in the
// claim-first modes, which run as on NewPgx.
func TestStoreConformancePipeline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		pipeline sqlinbox.PipelineConfig
		options  inboxtest.Options
	}{
		{"write-behind", sqlinbox.PipelineConfig{}, inboxtest.Options{Config: inbox.Config{WriteBehind: true}}},
		{"write-behind/one-connection", sqlinbox.PipelineConfig{Connections: 1}, inboxtest.Options{Config: inbox.Config{WriteBehind: true}}},
		{"claim-first", sqlinbox.PipelineConfig{}, inboxtest.Options{}},
		{"claim-first/queued", sqlinbox.PipelineConfig{}, inboxtest.Options{ExecAtCommit: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness { return pipelineBackend(t, c.pipeline).harness() }, &c.options)
		})
	}
}

// pipelineKitFixture is pgxKitFixture with its store made by NewPgxPipeline, on a pool of its
// own; the application's pool, which a buggy repository writes through, stays the other.
func pipelineKitFixture(t *testing.T) *kitFixture {
	f := pgxKitFixture(t)
	table := testenv.Name("kit_inbox")
	store, err := sqlinbox.NewPgxPipeline(openPgxPool(t, testenv.PostgresURL(t)), sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.pool.exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.name, f.store = "pgx-pipeline/postgres", store
	return f
}

// Correct handlers pass every scenario of the kit on the pipelined store, in the three modes
// (claim-first with TxFromContext and with ExecAtCommit run as on NewPgx).
func TestHandlerKitPassesCorrectHandlersOnPipeline(t *testing.T) {
	for _, m := range kitModes {
		t.Run(m.name, func(t *testing.T) {
			f := pipelineKitFixture(t)
			rec := &recordingTB{TB: t}
			c, opts := f.kitCase(t, f.billing(m.mode), m.writeBehind)
			took := timed(func() { handlertest.Run(t.Context(), rec, c, opts) })
			for _, r := range rec.reports() {
				t.Errorf("a correct handler was reported:\n%s", r)
			}
			if want := kitCountLog(m.writeBehind, 2); !slices.ContainsFunc(rec.logs, func(l string) bool { return strings.Contains(l, want) }) {
				t.Errorf("the kit did not count the handler's 2 statements; it logged %q", rec.logs)
			}
			t.Logf("%s, %s: every scenario in %s", f.name, m.name, took.Round(time.Millisecond))
		})
	}
}

// PgBouncer in transaction mode passes a pipeline of several Syncs on: it counts the Syncs a
// client sent and keeps the server connection until each is answered, and a server
// connection it hands to another client in between would carry nothing of the pipeline's
// (each message ends at its Sync). The suite in write-behind mode through it, in the modes
// that prepare nothing by name, with one lane so that pipelines carry many messages.
func TestPoolerPipelineStoreConformance(t *testing.T) {
	t.Parallel()
	poolerURL := testenv.PgBouncerURL(t, poolerServerConns)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness {
				return pipelineBackendAt(t, poolerURL, sqlinbox.PipelineConfig{Connections: 1},
					func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode }).harness()
			}, &inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
		})
	}
}

// Through PgBouncer, 400 messages from 32 goroutines on one lane travel in pipelines of
// several messages (fewer socket writes than messages), each once: one claim and one invoice
// per message.
func TestPoolerPipelinesCarrySeveralMessages(t *testing.T) {
	poolerURL := testenv.PgBouncerURL(t, poolerServerConns)
	var writes atomic.Int64
	b := pipelineBackendAt(t, poolerURL, sqlinbox.PipelineConfig{Connections: 1}, func(c *pgxpool.Config) {
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingWrites{conn, &writes}, err
		}
	})
	h := b.writeBehindHandler(t, "billing", ownKey)
	const messages, workers = 400, 32
	keys := make(chan string)
	var wg sync.WaitGroup
	var nacks []error
	var mu sync.Mutex
	for range workers {
		wg.Go(func() {
			for key := range keys {
				if n := deliverUntilAcked(t, h, key); len(n) > 0 {
					mu.Lock()
					nacks = append(nacks, n...)
					mu.Unlock()
				}
			}
		})
	}
	before := writes.Load()
	for range messages {
		keys <- watermill.NewUUID()
	}
	close(keys)
	wg.Wait()
	sent := writes.Load() - before
	checkNacksRetriable(t, b, nacks)
	wantRows(t, "claims", b.rows(t, b.table, ""), messages)
	wantRows(t, "invoices", b.rows(t, b.business, ""), messages)
	if sent >= messages {
		t.Errorf("%d socket writes for %d messages: the pipelines carried one message each", sent, messages)
	}
	t.Logf("%d messages in %d socket writes through PgBouncer", messages, sent)
}

// countingWrites counts the writes to a connection: one per pipeline.
type countingWrites struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingWrites) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A unique violation of a queued write is the handler's error on the pipelined store too,
// never a duplicate, also when it violates another table's primary key.
func TestPipelineUniqueViolationOfAQueuedWriteIsAnError(t *testing.T) {
	testWriteBehindUniqueViolation(t, pipelineBackend(t, sqlinbox.PipelineConfig{}))
}

package integration

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The storms on the pipelined store (sqlinbox.NewPgxPipeline) in write-behind mode: the chaos
// test, a consumer process killed mid-traffic (on the coalesced MariaDB store too), a
// PostgreSQL failover.

// pipelineWire is the PostgreSQL protocol as the fault proxy sees a pipeline: a Sync is the
// COMMIT of the message whose statements precede it (an implicit transaction), so the proxy
// cuts before a Sync (the message rolls back; the ones before it in the pipeline commit) and
// right after one (it commits, or not, and no result arrives).
type pipelineWire struct{ postgresWire }

func (w *pipelineWire) next(r *bufio.Reader) ([]byte, bool, bool, error) {
	frame, commit, ready, err := w.postgresWire.next(r)
	if err == nil && ready {
		commit = commit || frame[0] == 'S'
	}
	return frame, commit, ready, err
}

// The chaos test (TestChaosExactlyOneInvoicePerOrder) on the pipelined store: the 4 routers
// share one store, so that their deliveries in flight at once travel in one pipeline; the
// fault proxy cuts before and right after Syncs and at statements, the server terminates the
// pipelines' sessions, handlers fail and panic, a router is stopped and started again. Every
// order has exactly one invoice and one claim. Directly, with two lanes (so that copies meet
// on two connections as well as in one pipeline), and through PgBouncer in exec mode with
// one.
func TestChaosPipelineExactlyOneInvoicePerOrder(t *testing.T) {
	t.Parallel()
	orders := max(chaosOrders(t)/2, 100)
	t.Run("pgx-pipeline/postgres", func(t *testing.T) {
		runChaos(t, chaosPipelineAt(t, testenv.PostgresURL(t), sqlinbox.PipelineConfig{Connections: 2}), orders)
	})
}

// chaosPipelineAt is chaosPgxAt for the pipelined store: one store for every router, on one
// pool through a fault proxy in front of storeURL that knows Syncs, and a killer of the
// pool's sessions as chaosPostgresAt's.
func chaosPipelineAt(t *testing.T, storeURL string, pipeline sqlinbox.PipelineConfig) *chaosDB {
	b := pipelineBackend(t, pipeline)
	proxy := startFaultProxy(t, hostOf(t, storeURL), func() wireProtocol { return &pipelineWire{} },
		chaosPCutBeforeCommit, chaosPCutDuringCommit, chaosPCutAtStatement)
	app := testenv.Name("chaos")
	u, err := url.Parse(withHost(t, storeURL, proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	config, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	config.MaxConns = chaosPoolSize
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := sqlinbox.NewPgxPipeline(pool, sqlinbox.Config{Table: b.table}, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	return &chaosDB{
		b:           b,
		proxy:       proxy,
		newStore:    func(*testing.T) inbox.Store { return store },
		killer:      func(ctx context.Context, f *chaosFaults) { killSessions(ctx, b, app, f) },
		writeBehind: true,
	}
}

// killSessions terminates, every 50-150 ms until ctx ends, one session of application_name
// app that runs a statement or is idle in a transaction.
func killSessions(ctx context.Context, b *backend, app string, f *chaosFaults) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(50+rand.IntN(100)) * time.Millisecond):
		}
		n, err := b.direct.count(ctx, `SELECT COUNT(*) FROM (
			SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
			WHERE application_name = ? AND state IN ('active', 'idle in transaction')
			ORDER BY random() LIMIT 1) k WHERE done`, app)
		if err == nil {
			f.sessionsKilled.Add(int64(n))
		}
	}
}

// pipelineConsumerVar carries, to the consumer process of TestPipelineKilledConsumerExactlyOnce,
// the store's name in killedConsumerStores, the broker's URL, the queue, the store's database
// (its dsn as the backend has it), the inbox table and the business table, separated by
// spaces.
const pipelineConsumerVar = "INBOX_TEST_PIPELINE_CONSUMER"

// pipelineConsumerHandlers is how many router handlers the consumer process runs on the one
// queue: the deliveries in flight at once, which share pipelines.
const pipelineConsumerHandlers = 8

// killedConsumerStore is a store whose requests carry several messages, as the consumer
// process of TestPipelineKilledConsumerExactlyOnce runs it.
type killedConsumerStore struct {
	// backend makes the parent's tables, and counts from another session.
	backend func(t *testing.T) *backend
	// open makes the consumer process's store, on two connections, of table on dsn.
	open func(t *testing.T, dsn, table string) *sqlinbox.Store
	// insert is the handler's queued insert into the business table {t}.
	insert string
}

// killedConsumerStores are the stores a consumer process is killed on: the pipelined store on
// PostgreSQL, the coalesced one on MariaDB.
var killedConsumerStores = map[string]killedConsumerStore{
	"pgx-pipeline/postgres": {
		backend: func(t *testing.T) *backend { return pipelineBackend(t, sqlinbox.PipelineConfig{}) },
		open: func(t *testing.T, dsn, table string) *sqlinbox.Store {
			store, err := sqlinbox.NewPgxPipeline(openPgxPool(t, dsn), sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: 2})
			if err != nil {
				t.Fatal(err)
			}
			return store
		},
		insert: "INSERT INTO {t} (consumer, msg_key) VALUES ($1, $2)",
	},
	"coalesced/mariadb": {
		backend: func(t *testing.T) *backend {
			return mysqlBackendOf(t, "", coalescedStores(sqlinbox.PipelineConfig{}))
		},
		open: func(t *testing.T, dsn, table string) *sqlinbox.Store {
			store, db, err := sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, mysqlMultiStatementsDSNOf(t, dsn)),
				sqlinbox.MySQL{}, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return store
		},
		insert: "INSERT INTO {t} (consumer, msg_key) VALUES (?, ?)",
	},
}

// A consumer process killed with SIGKILL mid-traffic, five times, and started again each
// time, on each store of killedConsumerStores: its requests in flight die with it (the
// messages whose commit the server had run are committed and never acked; the others roll
// back), and RabbitMQ redelivers every unacked copy to the next process. 600 orders as 1-3
// copies: exactly one claim and one invoice per order, every copy acked, the queue empty.
func TestPipelineKilledConsumerExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, name := range slices.Sorted(maps.Keys(killedConsumerStores)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testKilledConsumer(t, name)
		})
	}
}

func testKilledConsumer(t *testing.T, storeName string) {
	const orders, kills = 600, 5
	amqpURL := testenv.AMQPURL(t)
	b := killedConsumerStores[storeName].backend(t)
	queue := testenv.Name("pipeline_orders")
	broker := chaosQueue(t, amqpURL, queue)
	var copies []*message.Message
	for range orders {
		order := watermill.NewUUID()
		for c := range 1 + rand.IntN(3) {
			msg := message.NewMessage(order, []byte(`{"order":"`+order+`"}`))
			msg.Metadata.Set("copy", order+"/"+strconv.Itoa(c))
			copies = append(copies, msg)
		}
	}
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	publisher, err := amqp.NewPublisher(amqp.NewDurableQueueConfig(amqpURL), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	for batch := range chunks(copies, 200) {
		if err := publisher.Publish(queue, batch...); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	acked := map[string]int{} // how often the handler chain acked each copy
	start := func() (*exec.Cmd, <-chan error) {
		return startHelper(t, "TestPipelineConsumerProcess", pipelineConsumerVar+"="+strings.Join(
			[]string{storeName, amqpURL, queue, b.dsn, b.table, b.business}, " "), func(line string) {
			if copy, ok := strings.CutPrefix(line, "acked "); ok {
				mu.Lock()
				acked[copy]++
				mu.Unlock()
			}
		})
	}
	claims := func() int { return claimsNoFail(b) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for k := 1; k <= kills; k++ {
		cmd, exited := start()
		target := orders * k / (kills + 1)
		if !pollUntil(ctx, func() bool { return claims() >= target }) {
			_ = cmd.Process.Kill()
			t.Fatalf("kill %d: %d claims after 3 minutes, want %d", k, claims(), target)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-exited
	}
	cmd, exited := start()
	done := func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		return n == len(copies) && claims() == orders && broker.ready(t) == 0
	}
	if !pollUntil(ctx, done) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		_ = cmd.Process.Kill()
		t.Fatalf("after the kills: %d/%d copies acked, %d/%d claims, %d ready in the queue", n, len(copies), claims(), orders, broker.ready(t))
	}
	_ = cmd.Process.Signal(os.Interrupt)
	if err := <-exited; err != nil {
		t.Errorf("the last consumer process: %v", err)
	}
	wantRows(t, "invoices", b.rows(t, b.business, ""), orders)
	wantRows(t, "orders with more than one invoice",
		b.rows(t, "(SELECT msg_key FROM "+b.business+" GROUP BY msg_key HAVING COUNT(*) > 1) d", ""), 0)
	wantRows(t, "claims", claims(), orders)
	wantRows(t, "invoices without a claim", b.rows(t, b.business+" i LEFT JOIN "+b.table+" c ON c.message_id = i.msg_key",
		"WHERE c.message_id IS NULL"), 0)
	if n := broker.ready(t); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	again := 0
	for _, n := range acked {
		again += n - 1
	}
	report(t, fmt.Sprintf("%s: consumer killed %d times: %d orders, %d copies, all acked, exactly once; "+
		"%d copies acked by a process killed before the broker had the ack, and delivered again", storeName, kills, orders, len(copies), again))
}

// TestPipelineConsumerProcess is the consumer process TestPipelineKilledConsumerExactlyOnce
// kills: a router with pipelineConsumerHandlers handlers on the queue, in write-behind mode on
// the store pipelineConsumerVar names, that prints "acked <copy>" for each copy it acks, until
// it is killed or interrupted.
func TestPipelineConsumerProcess(t *testing.T) {
	spec := os.Getenv(pipelineConsumerVar)
	if spec == "" {
		t.Skip("run by TestPipelineKilledConsumerExactlyOnce")
	}
	fields := strings.Fields(spec)
	if len(fields) != 6 {
		t.Fatalf("%s=%q: want 6 fields", pipelineConsumerVar, spec)
	}
	storeName, amqpURL, queue, dsn, table, business := fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]
	kind, ok := killedConsumerStores[storeName]
	if !ok {
		t.Fatalf("%s=%q: no store %q", pipelineConsumerVar, spec, storeName)
	}
	store := kind.open(t, dsn, table)
	var out sync.Mutex
	router := writeBehindQueueRouter(t, store, amqpURL, queue, pipelineConsumerHandlers,
		strings.ReplaceAll(kind.insert, "{t}", business), func(msg *message.Message, err error) {
			if err == nil {
				out.Lock()
				fmt.Println("acked " + msg.Metadata.Get("copy"))
				out.Unlock()
			}
		})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := router.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// writeBehindQueueRouter is a router of handlers handlers on the RabbitMQ queue (prefetch 4
// each), in write-behind mode on store as consumer billing, each queuing insert with
// ("billing", the message's UUID); observed sees what the handler chain returned for each
// delivery, the inbox's verdict.
func writeBehindQueueRouter(t *testing.T, store inbox.Store, amqpURL, queue string, handlers int, insert string,
	observed func(msg *message.Message, err error)) *message.Router {
	t.Helper()
	logger := watermill.NopLogger{}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := h(msg)
			observed(msg, err)
			return msgs, err
		}
	}, mw)
	config := amqp.NewDurableQueueConfig(amqpURL)
	config.Consume.Qos.PrefetchCount = 4
	for i := range handlers {
		sub, err := amqp.NewSubscriber(config, logger)
		if err != nil {
			t.Fatal(err)
		}
		router.AddConsumerHandler("billing-"+strconv.Itoa(i), queue, sub, func(msg *message.Message) error {
			return inbox.ExecAtCommit(msg.Context(), insert, "billing", msg.UUID)
		})
	}
	return router
}

// The failover of TestPostgresFailoverExactlyOnce on the pipelined store in write-behind mode:
// the primary stopped at once (a crash) with pipelines in flight, the standby promoted, the
// pools reconnecting through the multi-host URL. Synchronous and asynchronous replication,
// and synchronous through PgBouncer (exec mode) retargeted to the promoted standby.
func TestPostgresFailoverPipelineExactlyOnce(t *testing.T) {
	t.Parallel()
	store := failoverStore{name: "pgx-pipeline", writeBehind: true,
		open: func(t *testing.T, url, table string) (inbox.Store, func(ctx context.Context) (runner, bool)) {
			store, err := sqlinbox.NewPgxPipeline(openPgxPool(t, url), sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: 2})
			if err != nil {
				t.Fatal(err)
			}
			return store, func(context.Context) (runner, bool) { return nil, false }
		}}
	for _, synchronous := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync", false: "async"}[synchronous], func(t *testing.T) {
			r := testenv.NewPostgresReplica(t, synchronous)
			runFailover(t, r, r.URL, store, func(ctx context.Context) (testenv.Failover, error) { return r.Failover(ctx) })
		})
	}
	t.Run("via PgBouncer", func(t *testing.T) {
		r := testenv.NewPostgresReplica(t, true)
		bouncer := testenv.NewPgBouncer(t, r.Primary.URL(), poolerServerConns)
		runFailover(t, r, withQuery(t, bouncer.URL, "default_query_exec_mode", "exec"), store,
			func(ctx context.Context) (testenv.Failover, error) {
				f, err := r.Failover(ctx)
				if err != nil {
					return f, err
				}
				return f, bouncer.Retarget(r.Standby.URL())
			})
	})
}

package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The chaos test: 4 routers, each with its own database pool, compete for one
// durable RabbitMQ queue of orders, each order published 1-3 times in random order, while
// handlers fail and panic, a proxy between the routers and the database cuts connections
// before and during COMMIT and at random statements, the database server terminates inbox
// sessions, and one router is stopped and restarted. At the end every order has exactly one
// invoice, the inbox holds one row per order, every published copy was acked and the queue
// is empty.
//
// Sizes: chaosDefaultOrders orders on PostgreSQL (pgx and database/sql) and half of that
// on pgx in write-behind mode and on MariaDB; INBOX_CHAOS_ORDERS=n sets the PostgreSQL
// count, INBOX_CHAOS_LONG=1 sets it to 20,000 (the full run). 2,000 orders are about 4,000
// copies: each kind of fault strikes dozens of times (in a run: about 500 handler errors,
// 40 panics, 20-40 cuts before and during COMMIT, 40 at another statement, a session
// killed every 50-150 ms), as with 4,000, in half the time.
const (
	chaosDefaultOrders = 2000
	chaosLongOrders    = 20000
	chaosRouters       = 4
	// chaosPoolSize caps each router's pool: a router handles one message at a time, and the
	// database server is shared with the other packages' tests.
	chaosPoolSize = 4

	// Per delivery, in the handler, after it wrote the invoice.
	chaosPHandlerError = 0.10
	chaosPPanic        = 0.01
	chaosPKillInTx     = 0.01 // MariaDB: KILL the session (PostgreSQL uses a background killer)
	// Per frame, in the proxy.
	chaosPCutBeforeCommit = 0.01
	chaosPCutDuringCommit = 0.01
	chaosPCutAtStatement  = 0.001

	// chaosStall is how long a run may go without a copy acked or a claim or invoice
	// committed before it fails.
	chaosStall = 60 * time.Second
)

var errInjected = errors.New("injected handler error: invoice mailer timed out")

// chaosFaults counts what was injected and what the routers saw.
type chaosFaults struct {
	handlerErrors, panics, sessionsKilled, restarts atomic.Int64
	deliveries, nacks                               atomic.Int64
	// badAcks counts deliveries acked without their claim and one invoice committed.
	badAcks atomic.Int64
}

// chaosDB is one database under test: the backend (direct access, tables, inTx), how to open
// one router's store through the fault proxy, and how the server kills inbox sessions.
type chaosDB struct {
	b        *backend
	proxy    *faultProxy
	newStore func(t *testing.T) inbox.Store
	// killer, if set, runs in the background and terminates inbox sessions until ctx ends.
	killer func(ctx context.Context, f *chaosFaults)
	// killInTx, if set, is called by the handler (chaosPKillInTx of deliveries) to kill the
	// session the transaction runs on.
	killInTx func(ctx context.Context, tx runner) error
	// writeBehind runs the inbox in write-behind mode: the handler queues its invoice.
	writeBehind bool
	// queue makes the claim-first handler queue its invoice (inbox.ExecAtCommit) instead of writing
	// it through the transaction: it travels with COMMIT.
	queue bool
	// mysqlConfig is the driver's configuration through the proxy, on MariaDB.
	mysqlConfig *mysql.Config
}

func TestChaosExactlyOneInvoicePerOrder(t *testing.T) {
	t.Parallel()
	orders := chaosOrders(t)
	for _, c := range []struct {
		name   string
		orders int
		open   func(t *testing.T) *chaosDB
	}{
		{"pgx/postgres", orders, chaosPgx},
		// The handler queues its invoice; claim, invoice and COMMIT travel in one batch.
		{"pgx/postgres/write-behind", max(orders/2, 100), chaosPgxWriteBehind},
		{"database-sql/postgres", orders, chaosStdlibPostgres},
		{"database-sql/mariadb", max(orders/2, 100), chaosMariaDB},
		// The handler queues its invoice; claim, invoice and COMMIT travel in one request.
		{"database-sql/mariadb/write-behind", max(orders/2, 100), chaosMariaDBWriteBehind},
		// Claim-first on sqlinbox.NewMultiStatement's store: START TRANSACTION and
		// the claim travel as one request, the handler's INSERT alone, COMMIT alone; with the
		// invoice queued, the INSERT and COMMIT as a second request.
		{"database-sql/mariadb/multi-statements", max(orders/2, 100), chaosMariaDBMultiStatements},
		{"database-sql/mariadb/multi-statements/queued", max(orders/2, 100), chaosMariaDBMultiStatementsQueued},
		// sqlinbox.NewMultiStatementCoalesced, one store for every router with two
		// connections, so that deliveries in flight at once travel in one request: the proxy
		// cuts before, inside and right after its COMMITs.
		{"database-sql/mariadb/coalesced", max(orders/2, 100), chaosMariaDBCoalesced},
	} {
		t.Run(c.name, func(t *testing.T) { runChaos(t, c.open(t), c.orders) })
	}
}

func chaosOrders(t *testing.T) int {
	if v := os.Getenv("INBOX_CHAOS_ORDERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("INBOX_CHAOS_ORDERS=%q: want a positive number", v)
		}
		return n
	}
	if os.Getenv("INBOX_CHAOS_LONG") == "1" {
		return chaosLongOrders
	}
	return chaosDefaultOrders
}

func chaosPgx(t *testing.T) *chaosDB {
	return chaosPgxAt(t, testenv.PostgresURL(t), nil)
}

// chaosPgxAt is chaosPgx with the fault proxy in front of storeURL (a pooler's, say), and
// each router's pool configured by configure, if set.
func chaosPgxAt(t *testing.T, storeURL string, configure func(*pgxpool.Config)) *chaosDB {
	b := pgxBackend(t)
	db, proxiedURL := chaosPostgresAt(t, b, storeURL)
	db.newStore = func(t *testing.T) inbox.Store {
		config, err := pgxpool.ParseConfig(proxiedURL)
		if err != nil {
			t.Fatal(err)
		}
		config.MaxConns = chaosPoolSize
		if configure != nil {
			configure(config)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), config)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: b.table})
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	return db
}

func chaosPgxWriteBehind(t *testing.T) *chaosDB {
	db := chaosPgx(t)
	db.writeBehind = true
	return db
}

func chaosStdlibPostgres(t *testing.T) *chaosDB {
	return chaosStdlibPostgresAt(t, testenv.PostgresURL(t))
}

// chaosStdlibPostgresAt is chaosStdlibPostgres with the fault proxy in front of storeURL.
func chaosStdlibPostgresAt(t *testing.T, storeURL string) *chaosDB {
	b := stdlibPostgresBackend(t)
	db, proxiedURL := chaosPostgresAt(t, b, storeURL)
	db.newStore = func(t *testing.T) inbox.Store {
		db := openSQL(t, "pgx", proxiedURL)
		db.SetMaxOpenConns(chaosPoolSize)
		store, err := sqlinbox.NewDB(db, sqlinbox.Postgres{}, sqlinbox.Config{Table: b.table})
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	return db
}

// chaosPostgres puts a fault proxy in front of PostgreSQL and a background killer that
// terminates, every 50-150 ms, one of the routers' sessions that is running a statement
// or idle in a transaction. The routers' sessions carry an application_name of their own, so
// the killer never touches the test's direct pool.
//
// storeURL is where the proxy forwards to: PostgreSQL itself, or a pooler in front of it
// (which passes application_name on to the server connection it picks).
func chaosPostgresAt(t *testing.T, b *backend, storeURL string) (*chaosDB, string) {
	proxy := startFaultProxy(t, hostOf(t, storeURL), func() wireProtocol { return &postgresWire{} },
		chaosPCutBeforeCommit, chaosPCutDuringCommit, chaosPCutAtStatement)
	app := testenv.Name("chaos")
	u, err := url.Parse(withHost(t, storeURL, proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()

	db := &chaosDB{b: b, proxy: proxy}
	db.killer = func(ctx context.Context, f *chaosFaults) {
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
	return db, u.String()
}

// chaosMariaDB puts a fault proxy in front of MariaDB; handlers KILL their own session now
// and then (MariaDB's sessions cannot be told apart by name from the test's own).
func chaosMariaDB(t *testing.T) *chaosDB { return chaosMariaDBWith(t, false) }

// chaosMariaDBWriteBehind sends each message as one multi-statement request
// (sqlinbox.NewMultiStatement).
func chaosMariaDBWriteBehind(t *testing.T) *chaosDB {
	db := chaosMariaDBWith(t, true)
	db.writeBehind = true
	return db
}

func chaosMariaDBMultiStatements(t *testing.T) *chaosDB { return chaosMariaDBWith(t, true) }

func chaosMariaDBMultiStatementsQueued(t *testing.T) *chaosDB {
	db := chaosMariaDBWith(t, true)
	db.queue = true
	return db
}

// chaosMariaDBCoalesced gives every router one store made by sqlinbox.NewMultiStatementCoalesced,
// in write-behind mode.
func chaosMariaDBCoalesced(t *testing.T) *chaosDB {
	db := chaosMariaDBWith(t, true)
	var once sync.Once
	var store inbox.Store
	db.newStore = func(t *testing.T) inbox.Store {
		once.Do(func() {
			connector, err := mysql.NewConnector(db.mysqlConfig)
			if err != nil {
				t.Fatal(err)
			}
			s, pool, err := sqlinbox.NewMultiStatementCoalesced(connector, sqlinbox.MySQL{}, sqlinbox.Config{Table: db.b.table},
				sqlinbox.PipelineConfig{Connections: 2})
			if err != nil {
				t.Fatal(err)
			}
			pool.SetMaxOpenConns(chaosPoolSize)
			t.Cleanup(func() { pool.Close() })
			store = s
		})
		return store
	}
	db.writeBehind = true
	return db
}

// chaosMariaDBWith makes each router's store with sqlinbox.NewMultiStatement when
// multiStatements is set, with sqlinbox.NewDB otherwise.
func chaosMariaDBWith(t *testing.T, multiStatements bool) *chaosDB {
	b := mysqlBackend(t)
	dsn := testenv.MySQLDSN(t)
	start, end := strings.Index(dsn, "tcp("), strings.Index(dsn, ")/")
	proxy := startFaultProxy(t, dsn[start+4:end], func() wireProtocol { return &mysqlWire{} },
		chaosPCutBeforeCommit, chaosPCutDuringCommit, chaosPCutAtStatement)
	proxied, err := mysql.ParseDSN(dsn[:start+4] + proxy.Addr() + dsn[end:])
	if err != nil {
		t.Fatal(err)
	}
	// The driver logs every connection the proxy cuts; count those lines instead.
	driverLog := &countingLogger{}
	proxied.Logger = driverLog
	proxied.MultiStatements = multiStatements
	t.Cleanup(func() { t.Logf("MariaDB driver log lines about broken connections: %d", driverLog.lines.Load()) })
	return &chaosDB{
		b:           b,
		proxy:       proxy,
		mysqlConfig: proxied,
		newStore: func(t *testing.T) inbox.Store {
			connector, err := mysql.NewConnector(proxied)
			if err != nil {
				t.Fatal(err)
			}
			config := sqlinbox.Config{Table: b.table}
			if multiStatements {
				store, db, err := sqlinbox.NewMultiStatement(connector, sqlinbox.MySQL{}, config)
				if err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(chaosPoolSize)
				t.Cleanup(func() { db.Close() })
				return store
			}
			db := sql.OpenDB(connector)
			db.SetMaxOpenConns(chaosPoolSize)
			t.Cleanup(func() { db.Close() })
			store, err := sqlinbox.NewDB(db, sqlinbox.MySQL{}, config)
			if err != nil {
				t.Fatal(err)
			}
			return store
		},
		killInTx: func(ctx context.Context, tx runner) error {
			id, err := tx.count(ctx, "SELECT CONNECTION_ID()")
			if err != nil {
				return err
			}
			return b.direct.exec(ctx, "KILL "+strconv.Itoa(id))
		},
	}
}

type countingLogger struct{ lines atomic.Int64 }

func (l *countingLogger) Print(...any) { l.lines.Add(1) }

// chaosRouter is one running message.Router with its own subscriber.
type chaosRouter struct {
	router *message.Router
	done   chan struct{}
}

func (r *chaosRouter) stop(t *testing.T) {
	t.Helper()
	if err := r.router.Close(); err != nil {
		t.Errorf("closing router: %v", err)
	}
	<-r.done
}

func runChaos(t *testing.T, db *chaosDB, orders int) {
	amqpURL := testenv.AMQPURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := watermill.NopLogger{}
	faults := &chaosFaults{}
	began := time.Now()

	queue := testenv.Name("chaos_orders")
	broker := chaosQueue(t, amqpURL, queue)
	amqpConfig := amqp.NewDurableQueueConfig(amqpURL)
	amqpConfig.Consume.Qos.PrefetchCount = 8

	// acked holds every published copy the routers acked at least once.
	var ackedMu sync.Mutex
	var badAck atomic.Pointer[error]
	acked := map[string]struct{}{}
	countAcks := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			faults.deliveries.Add(1)
			out, err := h(msg)
			if err != nil {
				faults.nacks.Add(1)
				return out, err
			}
			ackedMu.Lock()
			acked[msg.Metadata.Get("copy")] = struct{}{}
			ackedMu.Unlock()
			// The router acks now: the order's claim and its one invoice must be committed
			// already, whether this delivery committed them or found them as a duplicate.
			n, err := db.b.direct.count(context.WithoutCancel(msg.Context()), "SELECT COUNT(*) FROM "+db.b.table+
				" i JOIN "+db.b.business+" b ON b.msg_key = i.message_id WHERE i.consumer = ? AND i.message_id = ?",
				"billing", msg.UUID)
			if err != nil || n != 1 {
				faults.badAcks.Add(1)
				err := fmt.Errorf("copy %s acked with %d committed claim+invoice rows (err %v)",
					msg.Metadata.Get("copy"), n, err)
				badAck.CompareAndSwap(nil, &err)
			}
			return out, nil
		}
	}

	insert := "INSERT INTO " + db.b.business + " (consumer, msg_key) VALUES (?, ?)"
	handle := func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := db.b.inTx(ctx)
		switch {
		case db.writeBehind && ok:
			return errors.New("a transaction in the context of a write-behind handler")
		case db.writeBehind:
			if err := inbox.ExecAtCommit(ctx, db.b.placeholders(insert), "billing", msg.UUID); err != nil {
				return err
			}
		case !ok:
			return errors.New("no inbox transaction in the handler's context")
		case db.queue:
			if err := inbox.ExecAtCommit(ctx, db.b.placeholders(insert), "billing", msg.UUID); err != nil {
				return err
			}
		default:
			if err := tx.exec(ctx, insert, "billing", msg.UUID); err != nil {
				return err
			}
		}
		switch x := rand.Float64(); {
		case x < chaosPHandlerError:
			faults.handlerErrors.Add(1)
			return errInjected
		case x < chaosPHandlerError+chaosPPanic:
			faults.panics.Add(1)
			panic("injected panic in the billing handler")
		case x < chaosPHandlerError+chaosPPanic+chaosPKillInTx && db.killInTx != nil && !db.writeBehind:
			if err := db.killInTx(ctx, tx); err != nil {
				return err
			}
			faults.sessionsKilled.Add(1)
		}
		return nil
	}

	stores := make([]inbox.Store, chaosRouters)
	for i := range stores {
		stores[i] = db.newStore(t)
	}
	// start runs router i; it may run on another goroutine than the test's, so it returns
	// errors instead of calling t.Fatal.
	start := func(i int) (*chaosRouter, error) {
		sub, err := amqp.NewSubscriber(amqpConfig, logger)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = sub.Close() })
		inboxMW, err := inbox.NewMiddleware(stores[i], inbox.Config{Consumer: "billing", WriteBehind: db.writeBehind}, logger)
		if err != nil {
			return nil, err
		}
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, logger)
		if err != nil {
			return nil, err
		}
		// The inbox innermost; Recoverer turns the re-raised panic into a nack.
		router.AddMiddleware(countAcks, middleware.Recoverer, inboxMW)
		router.AddConsumerHandler("billing", queue, sub, handle)
		r := &chaosRouter{router: router, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			if err := router.Run(ctx); err != nil {
				t.Errorf("router %d: %v", i, err)
			}
		}()
		<-router.Running()
		return r, nil
	}
	var routersMu sync.Mutex
	routers := make([]*chaosRouter, 0, chaosRouters)
	restarted := make(chan struct{})
	defer func() {
		cancel() // ends the restarter, the killer and every router's Run
		<-restarted
		routersMu.Lock()
		defer routersMu.Unlock()
		for _, r := range routers {
			r.stop(t)
		}
	}()
	for i := range chaosRouters {
		r, err := start(i)
		if err != nil {
			close(restarted)
			t.Fatalf("router %d: %v", i, err)
		}
		routers = append(routers, r)
	}

	killerDone := make(chan struct{})
	killerCtx, stopKiller := context.WithCancel(ctx)
	go func() {
		defer close(killerDone)
		if db.killer != nil {
			db.killer(killerCtx, faults)
		}
	}()

	// Publish every order 1-3 times, all copies in random order.
	var copies []*message.Message
	for range orders {
		order := watermill.NewUUID()
		payload := fmt.Appendf(nil, `{"order":%q,"amount_cents":%d}`, order, 100+rand.IntN(10000))
		for c := range 1 + rand.IntN(3) {
			msg := message.NewMessage(order, payload)
			msg.Metadata.Set("copy", order+"/"+strconv.Itoa(c))
			copies = append(copies, msg)
		}
	}
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	publisher, err := amqp.NewPublisher(amqpConfig, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	publishDone := make(chan error, 1)
	go func() {
		for batch := range chunks(copies, 200) {
			if err := publisher.Publish(queue, batch...); err != nil {
				publishDone <- err
				return
			}
		}
		publishDone <- nil
	}()

	claims := func() int { return db.b.rows(t, db.b.table, "") }

	// Stop router 1 once a quarter of the orders are claimed, start it again at half.
	go func() {
		defer close(restarted)
		if !pollUntil(ctx, func() bool { return claimsNoFail(db.b) >= orders/4 }) {
			return
		}
		routersMu.Lock()
		routers[1].stop(t)
		routersMu.Unlock()
		faults.restarts.Add(1)
		if !pollUntil(ctx, func() bool { return claimsNoFail(db.b) >= orders/2 }) {
			return
		}
		r, err := start(1)
		if err != nil {
			t.Errorf("restarting router 1: %v", err)
			return
		}
		routersMu.Lock()
		routers[1] = r
		routersMu.Unlock()
	}()

	if err := <-publishDone; err != nil {
		t.Fatalf("publish: %v", err)
	}
	published := time.Since(began)

	// Wait for the end state for as long as the run makes progress: a run that stops
	// acking, claiming and invoicing has lost a message or holds a claim for good, while a
	// run on a loaded machine is only slower.
	var state string
	progress, progressed := 0, time.Now()
	for {
		done, p := chaosFinished(t, db.b, broker, restarted, orders, len(copies), func() int {
			ackedMu.Lock()
			defer ackedMu.Unlock()
			return len(acked)
		}, &state)
		if done {
			break
		}
		if p > progress {
			progress, progressed = p, time.Now()
		}
		if time.Since(progressed) > chaosStall {
			t.Fatalf("no progress in %s: %s; faults so far: %s", chaosStall, state, faults.String(db.proxy))
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
	processed := time.Since(began)
	stopKiller()
	<-killerDone
	db.proxy.armed.Store(false)
	routersMu.Lock()
	for _, r := range routers {
		r.stop(t)
	}
	routers = nil
	routersMu.Unlock()

	// Nothing may be left for a consumer: no copy ready, none unacked (closing the routers
	// returned any unacked delivery to the queue).
	if n := broker.ready(t); n != 0 {
		t.Errorf("%d messages left in the queue after every router stopped", n)
	}
	wantRows(t, "invoices", db.b.rows(t, db.b.business, ""), orders)
	wantRows(t, "distinct orders invoiced", db.b.rows(t, "(SELECT DISTINCT msg_key FROM "+db.b.business+") d", ""), orders)
	wantRows(t, "orders with more than one invoice",
		db.b.rows(t, "(SELECT msg_key FROM "+db.b.business+" GROUP BY msg_key HAVING COUNT(*) > 1) d", ""), 0)
	wantRows(t, "inbox rows", claims(), orders)
	wantRows(t, "inbox rows of consumer billing", db.b.rows(t, db.b.table, "WHERE consumer = ?", "billing"), orders)

	if err := badAck.Load(); err != nil {
		t.Errorf("%d deliveries acked without their claim and invoice committed; the first: %v", faults.badAcks.Load(), *err)
	}

	report(t, fmt.Sprintf("chaos %s: %d orders, %d copies published (%.1fs), all processed in %.1fs: %s",
		t.Name(), orders, len(copies), published.Seconds(), processed.Seconds(), state))
	report(t, "chaos faults: "+faults.String(db.proxy))
}

// report logs line and, when INBOX_CHAOS_REPORT names a file, appends it there: go test
// shows a passing test's log only with -v, and CI prints the file after the tests.
func report(t *testing.T, line string) {
	t.Helper()
	t.Log(line)
	path := os.Getenv("INBOX_CHAOS_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("chaos report: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("chaos report: %v", err)
	}
}

// chaosFinished reports whether the run reached its end state: router 1 restarted, every
// copy acked, one claim and one invoice per order, nothing ready in the queue. progress
// grows with every copy acked and every claim and invoice committed; state describes where
// the run is.
func chaosFinished(t *testing.T, b *backend, broker *brokerQueue, restarted <-chan struct{}, orders, copies int,
	ackedCopies func() int, state *string,
) (done bool, progress int) {
	acked, ready := ackedCopies(), broker.ready(t)
	claims, invoices := b.rows(t, b.table, ""), b.rows(t, b.business, "")
	*state = fmt.Sprintf("copies acked %d/%d, claims %d/%d, invoices %d/%d, ready in queue %d",
		acked, copies, claims, orders, invoices, orders, ready)
	progress = acked + claims + invoices
	select {
	case <-restarted:
	default:
		*state += ", router 1 not restarted yet"
		return false, progress
	}
	return acked == copies && claims == orders && invoices == orders && ready == 0, progress
}

func (f *chaosFaults) String(p *faultProxy) string {
	return fmt.Sprintf("handler errors %d, panics %d, sessions killed by the server %d, "+
		"connections cut before COMMIT %d, during COMMIT %d, at another statement %d, router restarts %d; "+
		"deliveries %d, nacks %d, acks without a committed claim %d",
		f.handlerErrors.Load(), f.panics.Load(), f.sessionsKilled.Load(),
		p.cutBeforeCommit.Load(), p.cutDuringCommit.Load(), p.cutAtStatement.Load(), f.restarts.Load(),
		f.deliveries.Load(), f.nacks.Load(), f.badAcks.Load())
}

// claimsNoFail counts inbox rows from a goroutine that must not call t.Fatal; an error
// counts as no progress.
func claimsNoFail(b *backend) int {
	n, err := b.direct.count(context.Background(), "SELECT COUNT(*) FROM "+b.table)
	if err != nil {
		return 0
	}
	return n
}

// pollUntil polls cond every 20 ms until it holds (true) or ctx ends (false).
func pollUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

func chunks[T any](s []T, n int) func(yield func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// brokerQueue inspects (and finally deletes) the test's durable queue.
type brokerQueue struct {
	ch   *amqp091.Channel
	name string
}

// chaosQueue declares the durable queue the routers share (as watermill-amqp's durable
// config does) and deletes it when the test ends.
func chaosQueue(t *testing.T, amqpURL, name string) *brokerQueue {
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(name, false, false, false)
		conn.Close()
	})
	return &brokerQueue{ch: ch, name: name}
}

// ready returns how many messages wait in the queue for a consumer (unacked deliveries are
// not counted until their consumer goes away).
func (q *brokerQueue) ready(t *testing.T) int {
	t.Helper()
	info, err := q.ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", q.name, err)
	}
	return info.Messages
}

package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The tests in this file run the recommended stack (recommendedPoisonStack) while the
// database is away, and check that nothing healthy reaches the poison queue: a database
// stopped and started, a PostgreSQL failover, a missing or refused table; and that real
// poison still does.

// pacedOrders is how many orders a paced run publishes, one every pacedEvery.
const (
	pacedOrders = 300
	pacedEvery  = 30 * time.Millisecond
)

// pacedDB is the database of a paced run: how to make a store and reach the invoices.
type pacedDB struct {
	// newStore makes a store of table on a pool of its own, and says how a handler reaches
	// the inbox transaction.
	newStore func(t *testing.T, table string) (*sqlinbox.Store, func(ctx context.Context) (runner, bool))
	// direct reaches the database outside the stores, to create tables and count.
	direct runner
	// writeBehind runs the middleware in write-behind mode: the handler queues its insert
	// with inbox.ExecAtCommit.
	writeBehind bool
}

func postgresDB(t *testing.T, url string) *pacedDB {
	return &pacedDB{
		newStore: func(t *testing.T, table string) (*sqlinbox.Store, func(ctx context.Context) (runner, bool)) {
			store, err := sqlinbox.NewPgx(openPgxPool(t, url), sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return store, func(ctx context.Context) (runner, bool) {
				tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
				return pgxRunner{tx}, ok
			}
		},
		direct: pgxRunner{openPgxPool(t, url)},
	}
}

func mariaDB(t *testing.T, dsn string) *pacedDB {
	return &pacedDB{
		newStore: func(t *testing.T, table string) (*sqlinbox.Store, func(ctx context.Context) (runner, bool)) {
			store, err := sqlinbox.NewDB(openSQL(t, "mysql", dsn), sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return store, func(ctx context.Context) (runner, bool) {
				tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
				return sqlRunner{tx, false}, ok
			}
		},
		direct: sqlRunner{openSQL(t, "mysql", dsn), false},
	}
}

// coalescedMariaDB is mariaDB on sqlinbox.NewMultiStatementCoalesced in write-behind mode, on
// two connections: the deliveries in flight at once share multi-statement requests.
func coalescedMariaDB(t *testing.T, dsn string) *pacedDB {
	return &pacedDB{
		newStore: func(t *testing.T, table string) (*sqlinbox.Store, func(ctx context.Context) (runner, bool)) {
			store, db, err := sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, mysqlMultiStatementsDSNOf(t, dsn)),
				sqlinbox.MySQL{}, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return store, nil
		},
		direct:      sqlRunner{openSQL(t, "mysql", dsn), false},
		writeBehind: true,
	}
}

// pacedBroker is a broker a paced run consumes from, with as many router handlers on its
// topic as it has consumers.
type pacedBroker struct {
	name     string
	handlers int
	open     func(t *testing.T, topics ...string) (message.Publisher, message.Subscriber)
}

var pacedBrokers = []pacedBroker{
	// gochannel hands every message to the router at once: all of them wait in Retry.
	{"gochannel", 1, func(t *testing.T, _ ...string) (message.Publisher, message.Subscriber) {
		ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		t.Cleanup(func() { _ = ps.Close() })
		return ps, ps
	}},
	// RabbitMQ: four consumers of one durable queue, a message in flight each.
	{"rabbitmq", 4, func(t *testing.T, topics ...string) (message.Publisher, message.Subscriber) {
		url := testenv.AMQPURL(t)
		for _, topic := range topics {
			chaosQueue(t, url, topic)
		}
		config := amqp.NewDurableQueueConfig(url)
		pub, err := amqp.NewPublisher(config, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := amqp.NewSubscriber(config, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		cp := &closingPublisher{Publisher: pub}
		t.Cleanup(func() { _ = sub.Close(); _ = cp.Close() })
		return cp, sub
	}},
}

// errRefusedOrder is the billing handler's permanent refusal of an order whose metadata has
// "refuse": no retry processes it.
var errRefusedOrder = errors.New("order refused: no such customer")

// pacedRun is a router with the recommended stack consuming orders from a broker and writing
// one invoice per order through the inbox transaction, and the orders published to it.
type pacedRun struct {
	broker           pacedBroker
	db               *pacedDB
	table, business  string
	topic            string
	pub              message.Publisher
	poison           *poisonRecorder
	router           *message.Router
	routerDone       chan struct{}
	cancel           context.CancelFunc
	mu               sync.Mutex
	published        map[string]time.Time // by order
	acked            map[string]time.Time // by order, the first ack
	handlerStarts    []time.Time
	deliveryAttempts map[string]int // by order: runs of the inbox middleware
	lastRefusal      time.Time      // when the last attempt the table check refused began
}

// startPacedRun starts the run's router on db and broker; the inbox table is created with
// InitializeSchema unless table is given (and made by the test).
func startPacedRun(t *testing.T, db *pacedDB, broker pacedBroker, table string) *pacedRun {
	t.Helper()
	ctx := context.Background()
	r := &pacedRun{
		broker: broker, db: db, table: table,
		business:         testenv.Name("invoices"),
		topic:            testenv.Name("paced_orders"),
		published:        map[string]time.Time{},
		acked:            map[string]time.Time{},
		deliveryAttempts: map[string]int{},
		routerDone:       make(chan struct{}),
	}
	poisonTopic := r.topic + "_poison"
	pub, sub := broker.open(t, r.topic, poisonTopic)
	r.pub = pub
	r.poison = &poisonRecorder{next: pub}
	createSchema := r.table == ""
	if createSchema {
		r.table = testenv.Name("inbox")
	}
	store, inTx := db.newStore(t, r.table)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = db.direct.exec(ctx, "DROP TABLE IF EXISTS "+r.table)
		_ = db.direct.exec(ctx, "DROP TABLE IF EXISTS "+r.business)
	})
	if createSchema {
		if err := store.InitializeSchema(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, db.direct, "CREATE TABLE "+r.business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")

	logger := watermill.NopLogger{}
	inboxMW, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: db.writeBehind}, logger)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := recommendedPoisonStack(r.poison, poisonTopic, r.countAttempts(inboxMW), 5*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.router.AddMiddleware(r.countAcks)
	r.router.AddMiddleware(stack...)
	insert := "INSERT INTO " + r.business + " (consumer, msg_key) VALUES (?, ?)"
	for i := range broker.handlers {
		r.router.AddConsumerHandler("billing_"+strconv.Itoa(i), r.topic, sub, func(msg *message.Message) error {
			r.mu.Lock()
			r.handlerStarts = append(r.handlerStarts, time.Now())
			r.mu.Unlock()
			if msg.Metadata.Get("refuse") != "" {
				return errRefusedOrder
			}
			if hook := msg.Metadata.Get("webhook"); hook != "" {
				// The order's webhook, as its producer gave it: a URL that does not parse fails
				// every delivery of this message alike.
				if _, err := url.Parse(hook); err != nil {
					return fmt.Errorf("notify the order's webhook: %w", err)
				}
			}
			if db.writeBehind {
				return inbox.ExecAtCommit(msg.Context(), insert, "billing", msg.UUID)
			}
			tx, ok := inTx(msg.Context())
			if !ok {
				return errors.New("no inbox transaction in the handler's context")
			}
			return tx.exec(msg.Context(), insert, "billing", msg.UUID)
		})
	}
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go func() {
		defer close(r.routerDone)
		if err := r.router.Run(runCtx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(r.stop)
	<-r.router.Running()
	return r
}

func (r *pacedRun) stop() {
	r.cancel()
	_ = r.router.Close()
	<-r.routerDone
}

// countAcks, outermost, records when each order was first acked.
func (r *pacedRun) countAcks(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil {
			r.mu.Lock()
			if _, ok := r.acked[msg.UUID]; !ok {
				r.acked[msg.UUID] = time.Now()
			}
			r.mu.Unlock()
		}
		return out, err
	}
}

// countAttempts wraps the inbox middleware: it counts each order's attempts, and keeps when
// the last one that the table check refused began.
func (r *pacedRun) countAttempts(inboxMW message.HandlerMiddleware) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		inner := inboxMW(h)
		return func(msg *message.Message) ([]*message.Message, error) {
			began := time.Now()
			r.mu.Lock()
			r.deliveryAttempts[msg.UUID]++
			r.mu.Unlock()
			out, err := inner(msg)
			if errors.Is(err, sqlinbox.ErrTableMismatch) {
				r.mu.Lock()
				if began.After(r.lastRefusal) {
					r.lastRefusal = began
				}
				r.mu.Unlock()
			}
			return out, err
		}
	}
}

// firstAckAfter returns the first ack at or after since, if any.
func (r *pacedRun) firstAckAfter(since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, at := range r.acked {
		if !at.Before(since) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// publishPaced publishes n orders, one per tick of every: the pace of the traffic, not a
// synchronisation.
func (r *pacedRun) publishPaced(t *testing.T, n int, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range n {
		if i > 0 {
			<-tick.C
		}
		order := watermill.NewUUID()
		msg := message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order))
		r.mu.Lock()
		r.published[order] = time.Now()
		r.mu.Unlock()
		if err := r.pub.Publish(r.topic, msg); err != nil {
			t.Errorf("publish order %d: %v", i, err)
			return
		}
	}
}

// publishedCount is how many orders were published so far.
func (r *pacedRun) publishedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.published)
}

func (r *pacedRun) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// waitAcked waits until n orders were acked, or fails t when deadline passes.
func (r *pacedRun) waitAcked(t *testing.T, n int, deadline time.Time) {
	t.Helper()
	for r.ackedCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d orders acked by the deadline; %d poisoned", r.broker.name, r.ackedCount(), n, len(r.poison.poisoned()))
		}
		time.Sleep(20 * time.Millisecond) // polling the outcome
	}
}

// checkExactlyOnce checks that nothing was poisoned and every order has one claim and one
// invoice.
func (r *pacedRun) checkExactlyOnce(t *testing.T, orders int) {
	t.Helper()
	for _, msg := range r.poison.poisoned() {
		t.Errorf("%s: order %s poisoned: %s", r.broker.name, msg.UUID, msg.Metadata.Get(middleware.ReasonForPoisonedKey))
	}
	r.checkInvoices(t, orders)
}

// checkInvoices checks that orders orders have one claim and one invoice each.
func (r *pacedRun) checkInvoices(t *testing.T, orders int) {
	t.Helper()
	ctx := context.Background()
	count := func(query string) int {
		t.Helper()
		n, err := r.db.direct.count(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	wantRows(t, r.broker.name+": invoices", count("SELECT COUNT(*) FROM "+r.business), orders)
	wantRows(t, r.broker.name+": orders invoiced", count("SELECT COUNT(DISTINCT msg_key) FROM "+r.business), orders)
	wantRows(t, r.broker.name+": claims", count("SELECT COUNT(*) FROM "+r.table), orders)
}

// handlersStartedBetween counts the handler runs that started after from and before to.
func (r *pacedRun) handlersStartedBetween(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.handlerStarts {
		if s.After(from) && s.Before(to) {
			n++
		}
	}
	return n
}

// afterRestart returns how long after restarted the last order was acked, and the last of
// the orders published before restarted (the backlog of the outage).
func (r *pacedRun) afterRestart(restarted time.Time) (last, backlog time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for order, at := range r.acked {
		last = max(last, at.Sub(restarted))
		if r.published[order].Before(restarted) {
			backlog = max(backlog, at.Sub(restarted))
		}
	}
	return last, backlog
}

// maxAttempts is the most attempts any order took.
func (r *pacedRun) maxAttempts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	most := 0
	for _, n := range r.deliveryAttempts {
		most = max(most, n)
	}
	return most
}

// The database stopped at once (PostgreSQL's immediate shutdown, MariaDB killed) for 5 s
// and for 30 s while 300 orders arrive at a steady pace, on gochannel and RabbitMQ at once,
// then started again: with the recommended stack every order is invoiced once and nothing
// reaches the poison queue; no handler starts while the database is down (the messages wait
// in Retry's backoff, their claims refused, no transaction open). And MariaDB killed for 5 s
// under the coalesced store in write-behind mode, whose requests in flight carry several
// messages' transactions (its handlers run before the store is reached, so they do start
// while the database is down; every order is still invoiced once). Each case has its own
// server; they run in parallel.
func TestDatabaseOutagePoisonsNothing(t *testing.T) {
	t.Parallel()
	type server struct {
		db          *pacedDB
		stop, start func() error
	}
	// The cases run at once, as subtests of their own goroutines: they mostly wait, and as
	// parallel subtests they would take turns for the package's -parallel slots
	// (serverBoundParallel) with its other parallel tests.
	var cases sync.WaitGroup
	defer cases.Wait()
	both := []time.Duration{5 * time.Second, 30 * time.Second}
	for _, c := range []struct {
		name    string
		outages []time.Duration
		start   func(t *testing.T) server
	}{
		{"postgres", both, func(t *testing.T) server {
			p := testenv.NewPostgres(t)
			return server{postgresDB(t, p.URL()), p.Stop, p.Start}
		}},
		{"mariadb", both, func(t *testing.T) server {
			m := testenv.NewMariaDB(t)
			return server{mariaDB(t, m.DSN("parseTime=true&interpolateParams=true")), func() error { m.Kill(); return nil }, m.Start}
		}},
		{"mariadb/coalesced", both[:1], func(t *testing.T) server {
			m := testenv.NewMariaDB(t)
			return server{coalescedMariaDB(t, m.DSN("parseTime=true")), func() error { m.Kill(); return nil }, m.Start}
		}},
	} {
		for _, outage := range c.outages {
			cases.Go(func() {
				t.Run(fmt.Sprintf("%s/%s", c.name, outage), func(t *testing.T) {
					s := c.start(t)
					var runs []*pacedRun
					for _, broker := range pacedBrokers {
						runs = append(runs, startPacedRun(t, s.db, broker, ""))
					}
					var published sync.WaitGroup
					for _, r := range runs {
						published.Go(func() { r.publishPaced(t, pacedOrders, pacedEvery) })
					}
					// Mid-traffic: once a third of the orders were published on every broker.
					waitFor(t, "a third of the orders published", func() bool {
						for _, r := range runs {
							if r.publishedCount() < pacedOrders/3 {
								return false
							}
						}
						return true
					})
					before := runs[0].publishedCount()
					if err := s.stop(); err != nil {
						t.Fatal(err)
					}
					down := time.Now() // the server has exited
					time.Sleep(outage) // the outage itself
					up := time.Now()
					if err := s.start(); err != nil {
						t.Fatal(err)
					}
					restarted := time.Now()
					published.Wait()
					for _, r := range runs {
						r.waitAcked(t, pacedOrders, restarted.Add(60*time.Second))
					}
					for _, r := range runs {
						r.stop()
						r.checkExactlyOnce(t, pacedOrders)
						// Write-behind runs the handler before it reaches the store (Config.WriteBehind):
						// handlers do start while the database is down, and their queued writes
						// go with the commit that fails.
						whileDown := r.handlersStartedBetween(down, up)
						if whileDown != 0 && !s.db.writeBehind {
							t.Errorf("%s: %d handler runs started while the database was down", r.broker.name, whileDown)
						}
						last, backlog := r.afterRestart(restarted)
						report(t, fmt.Sprintf("outage %s on %s: %d orders every %s, database down %.1fs after %d published, restarted in %.2fs; "+
							"%d poisoned; the backlog invoiced %.2fs and the last order %.2fs after the restart; at most %d attempts for one order; "+
							"%d handler runs started while it was down",
							t.Name(), r.broker.name, pacedOrders, pacedEvery, up.Sub(down).Seconds(), before,
							restarted.Sub(up).Seconds(), len(r.poison.poisoned()), backlog.Seconds(), last.Seconds(), r.maxAttempts(), whileDown))
					}
				})
			})
		}
	}
}

// publish publishes msgs at once.
func (r *pacedRun) publish(t *testing.T, msgs ...*message.Message) {
	t.Helper()
	r.mu.Lock()
	for _, msg := range msgs {
		r.published[msg.UUID] = time.Now()
	}
	r.mu.Unlock()
	if err := r.pub.Publish(r.topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// attemptsOf is how many times the inbox middleware ran for key.
func (r *pacedRun) attemptsOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliveryAttempts[key]
}

// A service whose inbox table is missing, or refused by the table check (a primary key on
// message_id alone), on PostgreSQL and MariaDB. CheckTable, which the documented program
// calls before router.Run, returns the table check's refusal: the program refuses to start. A
// router started anyway, with the recommended stack, keeps every message waiting in Retry for
// the window (200 messages, each retried past PoisonQueue's limit for the message's own
// errors; 12 s, so that the store's own checks, every 5 s, refuse the table again within it):
// none poisoned, none acked. Once the table is created as the schema makes it, the
// store sees it at its next check, within 10 s, no attempt is refused after the first ack,
// and all 200 are processed, once each.
func TestMissingOrRefusedTablePoisonsNothing(t *testing.T) {
	t.Parallel()
	const messages, window = 200, 12 * time.Second
	// The cases run at once, as TestDatabaseOutagePoisonsNothing's do.
	var cases sync.WaitGroup
	defer cases.Wait()
	for _, db := range []struct {
		name    string
		dialect sqlinbox.Dialect
		open    func(t *testing.T) *pacedDB
		refused string // the refused table's DDL ({t} the table)
	}{
		{"postgres", sqlinbox.Postgres{}, func(t *testing.T) *pacedDB { return postgresDB(t, testenv.PostgresURL(t)) },
			"CREATE TABLE {t} (" + pgColumns + ", PRIMARY KEY (message_id))"},
		{"mariadb", sqlinbox.MySQL{}, func(t *testing.T) *pacedDB { return mariaDB(t, testenv.MySQLDSN(t)) },
			"CREATE TABLE {t} (" + mysqlColumns + ", PRIMARY KEY (message_id)) ENGINE=InnoDB"},
	} {
		for _, c := range []struct {
			name, ddl, reason string
		}{
			{"missing table", "", "it does not exist"},
			{"primary key on message_id alone", db.refused, "its primary key is (message_id); want (consumer, message_id)"},
		} {
			cases.Go(func() {
				t.Run(db.name+"/"+c.name, func(t *testing.T) {
					ctx := context.Background()
					d := db.open(t)
					table := testenv.Name("inbox")
					if c.ddl != "" {
						mustExec(t, d.direct, strings.ReplaceAll(c.ddl, "{t}", table))
					}
					// The documented program's start-up check.
					probe, _ := d.newStore(t, table)
					err := probe.CheckTable(ctx)
					if !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), c.reason) {
						t.Fatalf("CheckTable: %v; want ErrTableMismatch saying %q", err, c.reason)
					}

					// A router started anyway.
					r := startPacedRun(t, d, pacedBrokers[0], table)
					began := time.Now()
					var msgs []*message.Message
					for range messages {
						order := watermill.NewUUID()
						msgs = append(msgs, message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order)))
					}
					r.publish(t, msgs...)
					time.Sleep(window) // the window in which the table stays wrong
					if n := len(r.poison.poisoned()); n != 0 {
						t.Errorf("%d of %d messages poisoned in %s on a wrong table; the first: %s", n, messages, window,
							r.poison.poisoned()[0].Metadata.Get(middleware.ReasonForPoisonedKey))
					}
					if n := r.ackedCount(); n != 0 {
						t.Errorf("%d messages acked on a wrong table", n)
					}
					fewest := math.MaxInt
					for _, msg := range msgs {
						fewest = min(fewest, r.attemptsOf(msg.UUID))
					}
					if fewest <= 1+poisonRetries {
						t.Errorf("a message was attempted %d times in %s; want more than the %d after which the message's own error is poisoned",
							fewest, window, 1+poisonRetries)
					}

					// The fix, as the schema makes the table; the running store finds it by itself.
					if c.ddl != "" {
						mustExec(t, d.direct, "DROP TABLE "+table)
					}
					ddl, err := sqlinbox.SchemaSQL(db.dialect, table)
					if err != nil {
						t.Fatal(err)
					}
					for _, statement := range strings.Split(strings.TrimSpace(ddl), ";\n") {
						mustExec(t, d.direct, strings.TrimSuffix(statement, ";"))
					}
					fixed := time.Now()
					// The store checks again every 5 s, and Retry's next attempt follows within
					// its longest wait, 2 s: the table is used within 10 s, as tableguard.go says.
					var used time.Time
					waitFor(t, "the first order acked on the fixed table", func() bool {
						var ok bool
						used, ok = r.firstAckAfter(fixed)
						if !ok && time.Since(fixed) > 10*time.Second {
							t.Fatalf("no order acked within 10 s of the table's fix")
						}
						return ok
					})
					// From then on the passing check stands for every message: none is refused
					// again. The wait for the rest guards against a hang; how long the 200 take
					// depends on the machine, and is reported, not bounded.
					r.waitAcked(t, messages, used.Add(2*time.Minute))
					healed := time.Since(fixed)
					r.mu.Lock()
					lastRefusal := r.lastRefusal
					r.mu.Unlock()
					if lastRefusal.After(used) {
						t.Errorf("an attempt that began %s after the first ack on the fixed table was refused by the table check",
							lastRefusal.Sub(used))
					}
					r.stop()
					r.checkExactlyOnce(t, messages)
					report(t, fmt.Sprintf("wrong table %s: %d messages, %d poisoned in the %.0fs the table was wrong (each attempted at least %d times); "+
						"the first acked %.2fs and all processed %.2fs after the table was fixed (%.1fs in all)",
						t.Name(), messages, len(r.poison.poisoned()), fixed.Sub(began).Seconds(), fewest, used.Sub(fixed).Seconds(),
						healed.Seconds(), time.Since(began).Seconds()))
				})
			})
		}
	}
}

// A PostgreSQL failover (a primary and a synchronous standby, the primary stopped at once
// and the standby promoted) while 300 orders arrive at a steady pace, on gochannel and
// RabbitMQ at once, with the recommended stack: the pools find the new primary through the
// multi-host URL, every order is invoiced once, nothing is poisoned.
func TestPostgresFailoverPoisonsNothing(t *testing.T) {
	t.Parallel()
	r := testenv.NewPostgresReplica(t, true)
	db := postgresDB(t, r.URL)
	var runs []*pacedRun
	for _, broker := range pacedBrokers {
		runs = append(runs, startPacedRun(t, db, broker, ""))
	}
	var published sync.WaitGroup
	for _, run := range runs {
		published.Go(func() { run.publishPaced(t, pacedOrders, pacedEvery) })
	}
	waitFor(t, "a third of the orders published", func() bool {
		for _, run := range runs {
			if run.publishedCount() < pacedOrders/3 {
				return false
			}
		}
		return true
	})
	before := runs[0].publishedCount()
	f, err := r.Failover(context.Background())
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	published.Wait()
	for _, run := range runs {
		run.waitAcked(t, pacedOrders, f.Promoted.Add(60*time.Second))
	}
	for _, run := range runs {
		run.stop()
		run.checkExactlyOnce(t, pacedOrders)
		last, backlog := run.afterRestart(f.Promoted)
		report(t, fmt.Sprintf("failover %s on %s: %d orders every %s, primary stopped after %d published, standby promoted in %.2fs; "+
			"%d poisoned; the backlog invoiced %.2fs and the last order %.2fs after the promotion; at most %d attempts for one order",
			t.Name(), run.broker.name, pacedOrders, pacedEvery, before, f.Promoted.Sub(f.Stopped).Seconds(),
			len(run.poison.poisoned()), backlog.Seconds(), last.Seconds(), run.maxAttempts()))
	}
}

// Real poison still reaches the poison queue with the recommended stack, after
// 1+poisonRetries attempts: an order the handler refuses for good, a copy of a processed
// message with another payload (a fingerprint mismatch) and a message without a UUID. The
// healthy orders published with them are invoiced once; nothing else is poisoned.
func TestRealPoisonStillPoisoned(t *testing.T) {
	for _, db := range []struct {
		name string
		open func(t *testing.T) *pacedDB
	}{
		{"postgres", func(t *testing.T) *pacedDB { return postgresDB(t, testenv.PostgresURL(t)) }},
		{"mariadb", func(t *testing.T) *pacedDB { return mariaDB(t, testenv.MySQLDSN(t)) }},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			r := startPacedRun(t, db.open(t), pacedBrokers[0], "")
			const healthy = 20
			var msgs []*message.Message
			for range healthy {
				order := watermill.NewUUID()
				msgs = append(msgs, message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order)))
			}
			twice := msgs[0].UUID
			r.publish(t, msgs...)
			r.waitAcked(t, healthy, time.Now().Add(30*time.Second))

			refused := message.NewMessage(watermill.NewUUID(), []byte(`{"customer":"nobody"}`))
			refused.Metadata.Set("refuse", "yes")
			mismatch := message.NewMessage(twice, []byte(`{"order":"another payload"}`))
			noUUID := message.NewMessage("", []byte(`{}`))
			r.publish(t, refused, mismatch, noUUID)
			waitFor(t, "three messages poisoned", func() bool { return len(r.poison.poisoned()) >= 3 })
			r.stop()

			want := map[string]struct {
				reason   string // in the poisoned message's reason_poisoned
				attempts int
			}{
				refused.UUID: {errRefusedOrder.Error(), 1 + poisonRetries},
				// A *FingerprintMismatchError; its first delivery succeeded.
				twice: {"was processed with payload fingerprint", 1 + 1 + poisonRetries},
				"":    {inbox.ErrInvalidKey.Error(), 1 + poisonRetries},
			}
			poisoned := r.poison.poisoned()
			if len(poisoned) != len(want) {
				t.Errorf("%d messages poisoned, want %d", len(poisoned), len(want))
			}
			for _, msg := range poisoned {
				w, ok := want[msg.UUID]
				reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey)
				switch {
				case !ok:
					t.Errorf("message %q poisoned (%s), want only the refused order, the mismatch and the message without a UUID", msg.UUID, reason)
				case !strings.Contains(reason, w.reason):
					t.Errorf("message %q poisoned with %q, want %q", msg.UUID, reason, w.reason)
				case r.attemptsOf(msg.UUID) != w.attempts:
					t.Errorf("message %q (%s): %d attempts, want %d", msg.UUID, w.reason, r.attemptsOf(msg.UUID), w.attempts)
				}
			}
			r.checkInvoices(t, healthy)
		})
	}
}

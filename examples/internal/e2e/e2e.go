// Package e2e is the end-to-end scenario every broker test runs: publish orders with
// duplicates, make the broker redeliver (nacks, and a consumer that dies before it acks),
// and check that the billing handler wrote exactly one invoice per order.
//
// It is the "one shared test suite run against every backend" idea from Watermill: the
// broker tests only say how to build a publisher and a subscriber.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Consumer is the inbox consumer name of the billing handler. It is set explicitly because
// the scenario runs several router handlers (workers) that must share one inbox partition.
const Consumer = "billing"

// Scenario describes one broker for Run.
type Scenario struct {
	// Topic the orders are published to and consumed from.
	Topic string
	// Publisher publishes the orders. Run does not close it.
	Publisher message.Publisher
	// NewSubscriber returns a new subscriber for one worker. Run calls it once per worker
	// and router start, because a restarted consumer starts with new subscribers; the
	// router closes them.
	NewSubscriber func(t *testing.T) message.Subscriber
	// Workers is how many router handlers consume the topic at once, as competing
	// consumers. Default: 1.
	Workers int
	// Orders is how many distinct orders are published. Default: 500.
	Orders int
	// MaxCopies is the most times one order is published. Default: 3.
	MaxCopies int
	// Crashes, when positive, makes the first router drop the acks of this many deliveries
	// (the handler commits, the broker never hears of it), then closes that router and
	// starts a second one, which must get those messages again from the broker. It must not
	// exceed the number of deliveries the broker lets be in flight at once. Default: 0, one
	// router and no restart.
	Crashes int
	// Key is the inbox key function. Default: the message UUID.
	Key func(*message.Message) (string, error)
	// Timeout bounds each wait. Default: 90s.
	Timeout time.Duration
}

func (s *Scenario) setDefaults() {
	if s.Workers == 0 {
		s.Workers = 1
	}
	if s.Orders == 0 {
		s.Orders = 500
	}
	if s.MaxCopies == 0 {
		s.MaxCopies = 3
	}
	if s.Timeout == 0 {
		s.Timeout = 90 * time.Second
	}
}

// Report is what a run counted.
type Report struct {
	Orders     int // distinct orders published
	Published  int // messages published, copies included
	Deliveries int // messages the routers received
	Runs       int // handler runs (inside the inbox transaction)
	Rollbacks  int // inbox transactions rolled back
	Skipped    int // deliveries acked as duplicates without running the handler
	Dropped    int // acks dropped before the restart
}

// errFlaky is what the flaky handler returns on the first run of some orders, after it has
// written the invoice: the rollback must discard it and the broker must redeliver.
var errFlaky = errors.New("e2e: first attempt fails on purpose")

// flaky reports whether order number i fails its first run.
func flaky(i int) bool { return i%7 == 3 }

// Pool connects to the test PostgreSQL (testenv: skip or fail when it is missing).
func Pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DropTable drops table when the test ends.
func DropTable(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	quoted, err := inbox.QuoteTableName(inbox.DialectPostgres, table)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(context.Background())
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+quoted); err != nil {
			t.Errorf("drop table %s: %v", table, err)
		}
	})
}

// Run runs the scenario against PostgreSQL in pool and checks the result. Tables get random
// names and are dropped when the test ends.
func Run(t *testing.T, pool *pgxpool.Pool, s Scenario) Report {
	t.Helper()
	s.setDefaults()
	ctx := t.Context()

	invoiceTable, inboxTable := testenv.Name("invoices"), testenv.Name("inbox")
	invoices, err := billing.NewInvoices(inbox.DialectPostgres, invoiceTable)
	if err != nil {
		t.Fatal(err)
	}
	DropTable(t, pool, invoiceTable)
	if _, err := pool.Exec(ctx, invoices.CreateTableSQL()); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	DropTable(t, pool, inboxTable)
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}

	p := newProbe()
	inboxMiddleware, err := inbox.NewMiddleware(countingStore{store, p}, inbox.Config{Consumer: Consumer, Key: s.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	orders, msgs := makeOrders(t, s.Orders, s.MaxCopies)
	for i, o := range orders {
		if flaky(i) {
			p.flaky[o.OrderID] = true
		}
	}

	startRouter := func(drop *dropper) *message.Router {
		t.Helper()
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		for w := range s.Workers {
			sub := s.NewSubscriber(t)
			if drop != nil {
				sub = dropSubscriber{sub, drop}
			}
			router.AddConsumerHandler(fmt.Sprintf("%s_%d", Consumer, w), s.Topic, sub, p.handler(invoices.Handle)).
				AddMiddleware(p.observe, inboxMiddleware)
		}
		runErr := make(chan error, 1)
		go func() { runErr <- router.Run(context.WithoutCancel(ctx)) }()
		select {
		case <-router.Running():
		case err := <-runErr:
			t.Fatalf("router stopped before it ran: %v", err)
		case <-time.After(s.Timeout):
			t.Fatalf("router did not start in %s", s.Timeout)
		}
		t.Cleanup(func() { _ = router.Close() })
		return router
	}
	closeRouter := func(router *message.Router) {
		t.Helper()
		if err := router.Close(); err != nil {
			t.Fatalf("close router: %v", err)
		}
	}

	var drop *dropper
	if s.Crashes > 0 {
		drop = newDropper(20, s.Crashes)
		t.Cleanup(drop.stop)
	}
	router := startRouter(drop)
	published := publish(s.Publisher, s.Topic, msgs)

	if drop != nil {
		// The first consumer commits these deliveries but dies before it acks them.
		waitFor(t, s.Timeout, "the first router to handle the deliveries whose acks it drops", func() bool {
			return drop.settledCount() == s.Crashes
		})
		closeRouter(router)
		router = startRouter(nil)
	}

	waitFor(t, s.Timeout, "every order to be committed and every dropped ack redelivered", func() bool {
		select {
		case err := <-published:
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			published = nil // a nil channel is never ready: publishing is done
		default:
		}
		if published != nil || p.committedOrders() < len(orders) {
			return false
		}
		if drop != nil {
			for _, id := range drop.droppedIDs() {
				if p.deliveriesOf(id) < 2 {
					return false
				}
			}
		}
		return true
	})
	closeRouter(router) // waits for the handlers: the counts are final from here on

	report := p.check(t, orders)
	report.Published = len(msgs)
	if drop != nil {
		report.Dropped = len(drop.droppedIDs())
	}
	checkDatabase(t, pool, invoices, inboxTable, orders, s.Key == nil)
	t.Logf("orders %d, published %d, deliveries %d, handler runs %d, rollbacks %d, duplicates skipped %d, acks dropped before restart %d",
		report.Orders, report.Published, report.Deliveries, report.Runs, report.Rollbacks, report.Skipped, report.Dropped)
	if report.Deliveries <= report.Orders || report.Skipped == 0 {
		t.Errorf("no duplicate was delivered: the run proves nothing")
	}
	return report
}

// makeOrders returns the orders and their messages (each order 1 to maxCopies times), in a
// random order, so that copies of one order travel at different times and at the same time.
func makeOrders(t *testing.T, n, maxCopies int) ([]billing.OrderPlaced, []*message.Message) {
	seed := rand.Uint64()
	t.Logf("order seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	orders := make([]billing.OrderPlaced, n)
	var msgs []*message.Message
	for i := range orders {
		orders[i] = billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(1 + rng.IntN(100000))}
		for range 1 + rng.IntN(maxCopies) {
			msg, err := billing.NewOrderMessage(orders[i])
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, msg)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return orders, msgs
}

// publish sends msgs from four goroutines at once and reports the first error, or nil when
// all are sent.
func publish(pub message.Publisher, topic string, msgs []*message.Message) <-chan error {
	done := make(chan error, 1)
	next := make(chan *message.Message)
	go func() {
		defer close(next)
		for _, m := range msgs {
			next <- m
		}
	}()
	go func() {
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		for range 4 {
			wg.Go(func() {
				for m := range next {
					if err := pub.Publish(topic, m); err != nil {
						once.Do(func() { first = err })
					}
				}
			})
		}
		wg.Wait()
		done <- first
	}()
	return done
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// checkDatabase checks the tables: one invoice per order, one inbox row per order.
func checkDatabase(t *testing.T, pool *pgxpool.Pool, invoices *billing.Invoices, inboxTable string, orders []billing.OrderPlaced, keyIsOrderID bool) {
	t.Helper()
	ctx := t.Context()
	counts, err := invoices.CountPgx(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Invoices != len(orders) || counts.Orders != len(orders) {
		t.Errorf("%d invoices for %d distinct orders, want exactly one for each of %d orders",
			counts.Invoices, counts.Orders, len(orders))
	}
	quoted, _ := inbox.QuoteTableName(inbox.DialectPostgres, inboxTable)
	rows, err := pool.Query(ctx, "SELECT message_id FROM "+quoted+" WHERE consumer = $1", Consumer)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(orders) {
		t.Errorf("%d inbox rows, want one per order: %d", len(keys), len(orders))
	}
	if keyIsOrderID {
		for _, o := range orders {
			if !keys[o.OrderID] {
				t.Errorf("order %s has no inbox row", o.OrderID)
				break
			}
		}
	}
}

// probe counts, per order, what the routers and the inbox did.
type probe struct {
	flaky map[string]bool // written before the routers start, read-only after

	mu          sync.Mutex
	deliveries  map[string]int    // order ID -> messages received
	runs        map[string]int    // order ID -> handler runs
	orderOf     map[string]string // inbox key -> order ID
	commits     map[string]int    // key -> successful commits
	rollbacks   map[string]int    // key -> rollbacks
	commitFails map[string]int    // key -> failed commits
	errs        map[string]int    // unexpected handler errors, by message
}

func newProbe() *probe {
	return &probe{
		flaky: map[string]bool{}, deliveries: map[string]int{}, runs: map[string]int{},
		orderOf: map[string]string{}, commits: map[string]int{}, rollbacks: map[string]int{},
		commitFails: map[string]int{}, errs: map[string]int{},
	}
}

// observe is the outermost middleware: it counts every delivery.
func (p *probe) observe(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		id := "?"
		if o, err := billing.DecodeOrder(msg); err == nil {
			id = o.OrderID
		}
		p.mu.Lock()
		p.deliveries[id]++
		p.mu.Unlock()
		out, err := h(msg)
		if err != nil && !errors.Is(err, errFlaky) {
			p.mu.Lock()
			p.errs[err.Error()]++
			p.mu.Unlock()
		}
		return out, err
	}
}

// handler wraps the billing handler: it counts runs, and fails the first run of a flaky
// order after the invoice is written.
func (p *probe) handler(h func(*message.Message) error) func(*message.Message) error {
	return func(msg *message.Message) error {
		order, err := billing.DecodeOrder(msg)
		if err != nil {
			return err
		}
		key, _ := inbox.KeyFromContext(msg.Context())
		p.mu.Lock()
		p.runs[order.OrderID]++
		run := p.runs[order.OrderID]
		p.orderOf[key] = order.OrderID
		p.mu.Unlock()
		if err := h(msg); err != nil {
			return err
		}
		if p.flaky[order.OrderID] && run == 1 {
			return errFlaky
		}
		return nil
	}
}

func (p *probe) deliveriesOf(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deliveries[id]
}

func (p *probe) committedOrders() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := map[string]bool{}
	for key := range p.commits {
		done[p.orderOf[key]] = true
	}
	return len(done)
}

func (p *probe) ended(key string, committed bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !committed:
		p.rollbacks[key]++
	case err != nil:
		p.commitFails[key]++
	default:
		p.commits[key]++
	}
}

// check asserts, per order: one commit, and a handler run beyond the first only where a
// transaction rolled back (or a commit failed).
func (p *probe) check(t *testing.T, orders []billing.OrderPlaced) Report {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	byOrder := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for key, n := range m {
			out[p.orderOf[key]] += n
		}
		return out
	}
	commits, rollbacks, commitFails := byOrder(p.commits), byOrder(p.rollbacks), byOrder(p.commitFails)

	r := Report{Orders: len(orders)}
	failures := 0
	fail := func(format string, args ...any) {
		if failures++; failures <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, o := range orders {
		id := o.OrderID
		r.Deliveries += p.deliveries[id]
		r.Runs += p.runs[id]
		r.Rollbacks += rollbacks[id]
		if commits[id] != 1 {
			fail("order %s: %d commits, want 1", id, commits[id])
		}
		if want := 1 + rollbacks[id] + commitFails[id]; p.runs[id] != want {
			fail("order %s: handler ran %d times with %d rollbacks and %d failed commits: a run that committed was repeated",
				id, p.runs[id], rollbacks[id], commitFails[id])
		}
		if p.flaky[id] && rollbacks[id] == 0 {
			fail("order %s failed its first run but nothing rolled back", id)
		}
	}
	r.Skipped = r.Deliveries - r.Runs
	if n := p.deliveries["?"]; n > 0 {
		fail("%d deliveries had no order in their payload", n)
	}
	if len(p.errs) > 0 {
		msgs := make([]string, 0, len(p.errs))
		for msg, n := range p.errs {
			msgs = append(msgs, fmt.Sprintf("%dx %s", n, msg))
		}
		sort.Strings(msgs)
		t.Logf("handler errors other than the planned ones (a shutdown cancels some):\n%s", strings.Join(msgs, "\n"))
	}
	return r
}

// countingStore tells the probe how each inbox transaction ended.
type countingStore struct {
	inbox.Store
	p *probe
}

func (s countingStore) Claim(ctx context.Context, consumer, key string) (inbox.Tx, bool, error) {
	tx, claimed, err := s.Store.Claim(ctx, consumer, key)
	if err != nil || !claimed {
		return tx, claimed, err
	}
	return countingTx{Tx: tx, key: key, p: s.p}, true, nil
}

type countingTx struct {
	inbox.Tx
	key string
	p   *probe
}

func (t countingTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.p.ended(t.key, true, err)
	return err
}

func (t countingTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.p.ended(t.key, false, err)
	return err
}

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
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	// NoRestart keeps the first router running after the acks are dropped: the broker must
	// redeliver those messages on its own (an ack timeout), to the same router.
	NoRestart bool
	// Key is the inbox key function. Default: the message UUID.
	Key func(*message.Message) (string, error)
	// Timeout bounds each wait. Default: 90s.
	Timeout time.Duration
	// Drained, if set, reports whether the broker has nothing left to deliver or redeliver
	// (no message published but undelivered, none delivered but unacked). Run waits for it
	// before it closes the last router, for a subscriber that must not be closed while
	// messages still arrive. Default: nil, no wait.
	Drained func(t *testing.T) bool
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
	CommitErrs int // commits that returned an error (which may still have been durable)
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
	quoted, err := sqlinbox.Postgres().QuoteTable(table)
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
	invoices, err := billing.NewInvoices(billing.Postgres, invoiceTable)
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
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: Consumer, Key: s.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	orders, msgs := makeOrders(t, s.Orders, s.MaxCopies)
	for i, o := range orders {
		if flaky(i) {
			p.flaky[o.OrderID] = true
		}
	}
	for _, m := range msgs {
		o, _ := billing.DecodeOrder(m)
		p.copies[o.OrderID]++
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
		// Flaky orders are not dropped: their nack would be redelivered, and the test could
		// not tell that redelivery from the one the restart causes.
		drop = newDropper(20, s.Crashes, func(id string) bool { return !p.flaky[id] })
		t.Cleanup(drop.stop)
	}
	router := startRouter(drop)
	published := publish(s.Publisher, s.Topic, msgs)

	if drop != nil {
		// The first consumer commits these deliveries but dies before it acks them.
		waitFor(t, s.Timeout, "the first router to handle the deliveries whose acks it drops", func() bool {
			return drop.settledCount() == s.Crashes
		})
		if !s.NoRestart {
			closeRouter(router)
			router = startRouter(nil)
		}
	}

	var missing string // what the last check found missing, for the timeout message
	waitFor(t, s.Timeout, "every order to be committed and every dropped ack redelivered", func() bool {
		select {
		case err := <-published:
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			published = nil // a nil channel is never ready: publishing is done
		default:
		}
		if published != nil {
			missing = "publishing is not done"
			return false
		}
		if n := p.endedOrders(); n < len(orders) {
			missing = fmt.Sprintf("%d of %d orders committed; %s", n, len(orders), p.uncommitted(orders, drop))
			return false
		}
		// A failed commit may not have been durable: the invoices are the truth.
		if counts, err := invoices.CountPgx(ctx, pool); err != nil || counts.Orders < len(orders) {
			missing = fmt.Sprintf("invoices for %d of %d orders (%v); %s", counts.Orders, len(orders), err, p.uncommitted(orders, drop))
			return false
		}
		if drop != nil {
			// A dropped order is delivered once more than it was published: the broker
			// delivered the message it never saw acked again (to the second router, or
			// with NoRestart after its ack timeout).
			for _, id := range drop.droppedIDs() {
				if n := p.deliveriesOf(id); n <= p.copies[id] {
					missing = fmt.Sprintf("dropped order %s delivered %d times, published %d times", id, n, p.copies[id])
					return false
				}
			}
		}
		return true
	}, &missing)
	if s.Drained != nil {
		// Extra copies of committed orders, and redeliveries of deliveries that outlived the
		// broker's ack timeout, may still be on their way.
		waitFor(t, s.Timeout, "the broker to have nothing left to deliver", func() bool { return s.Drained(t) })
	}
	closeRouter(router) // waits for the handlers: the counts are final from here on

	report := p.check(t, orders)
	report.Published = len(msgs)
	if drop != nil {
		report.Dropped = len(drop.droppedIDs())
	}
	checkDatabase(t, pool, invoices, inboxTable, orders, s.Key == nil)
	t.Logf("orders %d, published %d, deliveries %d, handler runs %d, rollbacks %d, failed commits %d, duplicates skipped %d, acks dropped %d",
		report.Orders, report.Published, report.Deliveries, report.Runs, report.Rollbacks, report.CommitErrs, report.Skipped, report.Dropped)
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
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, missing ...*string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			why := ""
			for _, m := range missing {
				why = ": " + *m
			}
			buf := make([]byte, 8<<20)
			buf = buf[:runtime.Stack(buf, true)]
			dump := filepath.Join(os.TempDir(), fmt.Sprintf("e2e-%s-goroutines.txt", strings.ReplaceAll(t.Name(), "/", "_")))
			_ = os.WriteFile(dump, buf, 0o644)
			t.Fatalf("timed out after %s waiting for %s%s (goroutines: %s)", timeout, what, why, dump)
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
	quoted, _ := sqlinbox.Postgres().QuoteTable(inboxTable)
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

// probe counts, per order, what the routers and the inbox did. It sees the inbox from
// outside, through its contract: a handler run whose error the middleware returns was rolled
// back; a run that succeeded, when the middleware then succeeds too, was committed.
type probe struct {
	flaky  map[string]bool // written before the routers start, read-only after
	copies map[string]int  // order ID -> messages published; read-only after the start

	mu          sync.Mutex
	deliveries  map[string]int // order ID -> messages received
	runs        map[string]int // order ID -> handler runs
	commits     map[string]int // order ID -> runs that committed
	rollbacks   map[string]int // order ID -> runs that failed, so rolled back
	commitFails map[string]int // order ID -> runs that succeeded but whose commit failed
	skipped     map[string]int // order ID -> deliveries acked as duplicates
	errs        map[string]int // unexpected errors, by message
}

func newProbe() *probe {
	return &probe{
		flaky: map[string]bool{}, copies: map[string]int{}, deliveries: map[string]int{},
		runs: map[string]int{}, commits: map[string]int{}, rollbacks: map[string]int{},
		commitFails: map[string]int{}, skipped: map[string]int{}, errs: map[string]int{},
	}
}

// runCtxKey carries a delivery's *run from observe to the handler.
type runCtxKey struct{}

// run is what the handler reports to observe about one delivery.
type run struct {
	ran bool
	err error
}

// observe is the outermost middleware: it counts every delivery and how it ended.
func (p *probe) observe(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		id := "?"
		if o, err := billing.DecodeOrder(msg); err == nil {
			id = o.OrderID
		}
		p.mu.Lock()
		p.deliveries[id]++
		p.mu.Unlock()

		r := &run{}
		ctx := msg.Context()
		msg.SetContext(context.WithValue(ctx, runCtxKey{}, r))
		out, err := h(msg)
		msg.SetContext(ctx)

		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case !r.ran && err == nil:
			p.skipped[id]++ // a duplicate, acked without running the handler
		case !r.ran: // the inbox could not claim (the consumer is stopping, say)
		case r.err != nil:
			p.rollbacks[id]++
		case err != nil:
			p.commitFails[id]++
		default:
			p.commits[id]++
		}
		if err != nil && !errors.Is(err, errFlaky) {
			p.errs[err.Error()]++
		}
		return out, err
	}
}

// handler wraps the billing handler: it counts runs, and fails the first run of a flaky
// order after the invoice is written.
func (p *probe) handler(h func(*message.Message) error) func(*message.Message) error {
	return func(msg *message.Message) (err error) {
		order, err := billing.DecodeOrder(msg)
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.runs[order.OrderID]++
		n := p.runs[order.OrderID]
		p.mu.Unlock()
		if r, ok := msg.Context().Value(runCtxKey{}).(*run); ok {
			r.ran = true
			defer func() { r.err = err }()
		}
		if err := h(msg); err != nil {
			return err
		}
		if p.flaky[order.OrderID] && n == 1 {
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

// uncommitted describes the first order not committed yet.
func (p *probe) uncommitted(orders []billing.OrderPlaced, drop *dropper) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range orders {
		id := o.OrderID
		if p.commits[id] == 0 {
			dropped := drop != nil && slices.Contains(drop.droppedIDs(), id)
			return fmt.Sprintf("order %s: published %d, delivered %d, runs %d, rollbacks %d, failed commits %d, flaky %t, ack dropped %t",
				id, p.copies[id], p.deliveries[id], p.runs[id], p.rollbacks[id], p.commitFails[id], p.flaky[id], dropped)
		}
	}
	return ""
}

// endedOrders counts the orders with a handler run that committed, or whose commit failed
// (and may have been durable).
func (p *probe) endedOrders() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for id, runs := range p.runs {
		if runs > 0 && p.commits[id]+p.commitFails[id] > 0 {
			n++
		}
	}
	return n
}

// check asserts, per order: one commit, and a handler run beyond the first only where a
// transaction rolled back (or a commit failed).
func (p *probe) check(t *testing.T, orders []billing.OrderPlaced) Report {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()

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
		r.Rollbacks += p.rollbacks[id]
		r.CommitErrs += p.commitFails[id]
		r.Skipped += p.skipped[id]
		// A commit that failed may still have been durable (the middleware documents
		// it): the redelivery is then a duplicate. So a failed commit counts as an end
		// that may or may not have stuck; the invoice table says which (checkDatabase).
		if p.commits[id] > 1 {
			fail("order %s: %d commits, want 1", id, p.commits[id])
		}
		if p.commits[id]+p.commitFails[id] == 0 {
			fail("order %s: no handler run committed", id)
		}
		if p.runs[id] > 1+p.rollbacks[id]+p.commitFails[id] {
			fail("order %s: handler ran %d times with %d rollbacks and %d failed commits: a committed run was repeated",
				id, p.runs[id], p.rollbacks[id], p.commitFails[id])
		}
		if p.flaky[id] && p.rollbacks[id] == 0 {
			fail("order %s failed its first run but nothing rolled back", id)
		}
	}
	if n := p.deliveries["?"]; n > 0 {
		fail("%d deliveries had no order in their payload", n)
	}
	if len(p.errs) > 0 {
		msgs := make([]string, 0, len(p.errs))
		for msg, n := range p.errs {
			msgs = append(msgs, fmt.Sprintf("%dx %s", n, msg))
		}
		sort.Strings(msgs)
		t.Logf("errors other than the planned ones (a shutdown cancels some):\n%s", strings.Join(msgs, "\n"))
	}
	return r
}

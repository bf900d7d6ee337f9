// Package e2e is the end-to-end scenario every broker test runs: publish orders with
// duplicates, make the broker redeliver (nacks, and a consumer that dies before it acks),
// and check that the invoice handler wrote exactly one invoice per order.
//
// It is the "one shared test suite run against every backend" idea from Watermill: the
// broker tests only say how to build a publisher and a subscriber.
package e2e

import (
	"context"
	"errors"
	"fmt"
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

// Consumer is the inbox consumer name of the invoice handler. It is set explicitly because
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

// Run runs the scenario against PostgreSQL in pool and checks the result. Tables get random
// names and are dropped when the test ends.
func Run(t *testing.T, pool *pgxpool.Pool, s Scenario) Report {
	t.Helper()
	s.setDefaults()
	r := newScenarioRun(t, pool, s)
	var drop *dropper
	if s.Crashes > 0 {
		// Flaky orders are not dropped: their nack would be redelivered, and the test could
		// not tell that redelivery from the one the restart causes.
		drop = newDropper(20, s.Crashes, func(id string) bool { return !r.probe.flaky[id] })
		t.Cleanup(drop.stop)
	}
	router := r.startRouter(drop)
	published := publish(s.Publisher, s.Topic, r.msgs)
	if drop != nil {
		router = r.crash(router, drop)
	}
	r.waitUntilDone(published, drop)
	if s.Drained != nil {
		// Extra copies of committed orders, and redeliveries of deliveries that outlived the
		// broker's ack timeout, may still be on their way.
		waitFor(t, s.Timeout, "the broker to have nothing left to deliver", func() bool { return s.Drained(t) })
	}
	closeRouter(t, router) // waits for the handlers: the counts are final from here on
	return r.check(drop)
}

// scenarioRun is one Run: its tables, its inbox, its orders and what the probe saw.
type scenarioRun struct {
	t               *testing.T
	pool            *pgxpool.Pool
	s               Scenario
	invoices        *Invoices
	inboxTable      string
	inboxMiddleware message.HandlerMiddleware
	probe           *probe
	orders          []billing.OrderPlaced
	msgs            []*message.Message // the orders' messages, copies included, in publishing order
}

// newScenarioRun creates the invoice and inbox tables (dropped when the test ends), the
// inbox middleware, and the orders with their copies.
func newScenarioRun(t *testing.T, pool *pgxpool.Pool, s Scenario) *scenarioRun {
	t.Helper()
	ctx := t.Context()
	r := &scenarioRun{t: t, pool: pool, s: s, inboxTable: testenv.Name("inbox"), probe: newProbe()}
	invoiceTable := testenv.Name("invoices")
	invoices, err := NewInvoices(invoiceTable)
	if err != nil {
		t.Fatal(err)
	}
	r.invoices = invoices
	DropTable(t, pool, invoiceTable)
	if err := invoices.CreateTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: r.inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	DropTable(t, pool, r.inboxTable)
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	r.inboxMiddleware, err = inbox.NewMiddleware(store, inbox.Config{Consumer: Consumer, Key: s.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.orders, r.msgs = makeOrders(t, s.Orders, s.MaxCopies)
	for i, o := range r.orders {
		if flaky(i) {
			r.probe.flaky[o.OrderID] = true
		}
	}
	for _, m := range r.msgs {
		o, _ := billing.DecodeOrder(m)
		r.probe.copies[o.OrderID]++
	}
	return r
}

// startRouter starts a router with one handler per worker, each on a new subscriber whose
// deliveries pass through drop, if not nil. The router is closed when the test ends.
func (r *scenarioRun) startRouter(drop *dropper) *message.Router {
	t := r.t
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	for w := range r.s.Workers {
		sub := r.s.NewSubscriber(t)
		if drop != nil {
			sub = dropSubscriber{sub, drop}
		}
		router.AddConsumerHandler(fmt.Sprintf("%s_%d", Consumer, w), r.s.Topic, sub, r.probe.handler(r.invoices.Handle)).
			AddMiddleware(r.probe.observe, r.inboxMiddleware)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.WithoutCancel(t.Context())) }()
	select {
	case <-router.Running():
	case err := <-runErr:
		t.Fatalf("router stopped before it ran: %v", err)
	case <-time.After(r.s.Timeout):
		t.Fatalf("router did not start in %s", r.s.Timeout)
	}
	t.Cleanup(func() { _ = router.Close() })
	return router
}

func closeRouter(t *testing.T, router *message.Router) {
	t.Helper()
	if err := router.Close(); err != nil {
		t.Fatalf("close router: %v", err)
	}
}

// crash waits until the first router has handled the deliveries whose acks it drops: it
// committed them but dies before it acks them. Unless NoRestart, it then closes that router
// and returns a second one, which must get those messages again from the broker.
func (r *scenarioRun) crash(router *message.Router, drop *dropper) *message.Router {
	r.t.Helper()
	waitFor(r.t, r.s.Timeout, "the first router to handle the deliveries whose acks it drops", func() bool {
		return drop.settledCount() == r.s.Crashes
	})
	if r.s.NoRestart {
		return router
	}
	closeRouter(r.t, router)
	return r.startRouter(nil)
}

// waitUntilDone waits until publishing is done, every order is committed and invoiced, and
// every dropped ack was redelivered.
func (r *scenarioRun) waitUntilDone(published <-chan error, drop *dropper) {
	r.t.Helper()
	var missing string // what the last check found missing, for the timeout message
	waitFor(r.t, r.s.Timeout, "every order to be committed and every dropped ack redelivered", func() bool {
		select {
		case err := <-published:
			if err != nil {
				r.t.Fatalf("publish: %v", err)
			}
			published = nil // a nil channel is never ready: publishing is done
		default:
		}
		if published != nil {
			missing = "publishing is not done"
			return false
		}
		missing = r.missing(drop)
		return missing == ""
	}, &missing)
}

// missing says what is missing before every order is done, or "".
func (r *scenarioRun) missing(drop *dropper) string {
	p, orders := r.probe, r.orders
	if n := p.endedOrders(); n < len(orders) {
		return fmt.Sprintf("%d of %d orders committed; %s", n, len(orders), p.uncommitted(orders, drop))
	}
	// A failed commit may not have been durable: the invoices are the truth.
	if counts, err := r.invoices.Count(r.t.Context(), r.pool); err != nil || counts.Orders < len(orders) {
		return fmt.Sprintf("invoices for %d of %d orders (%v); %s", counts.Orders, len(orders), err, p.uncommitted(orders, drop))
	}
	if drop == nil {
		return ""
	}
	// A dropped order is delivered once more than it was published: the broker delivered
	// the message it never saw acked again (to the second router, or with NoRestart after
	// its ack timeout).
	for _, id := range drop.droppedIDs() {
		if n := p.deliveriesOf(id); n <= p.copies[id] {
			return fmt.Sprintf("dropped order %s delivered %d times, published %d times", id, n, p.copies[id])
		}
	}
	return ""
}

// check asserts what the probe saw and what the tables hold, and returns the report.
func (r *scenarioRun) check(drop *dropper) Report {
	t := r.t
	t.Helper()
	report := r.probe.check(t, r.orders)
	report.Published = len(r.msgs)
	if drop != nil {
		report.Dropped = len(drop.droppedIDs())
	}
	checkDatabase(t, r.pool, r.invoices, r.inboxTable, r.orders, r.s.Key == nil)
	t.Logf("orders %d, published %d, deliveries %d, handler runs %d, rollbacks %d, failed commits %d, duplicates skipped %d, acks dropped %d",
		report.Orders, report.Published, report.Deliveries, report.Runs, report.Rollbacks, report.CommitErrs, report.Skipped, report.Dropped)
	if report.Deliveries <= report.Orders || report.Skipped == 0 {
		t.Errorf("no duplicate was delivered: the run proves nothing")
	}
	return report
}

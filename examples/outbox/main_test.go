package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// errPlanned is what a failing run returns after it has written its invoice and published its
// InvoiceCreated to the outbox: the inbox must roll back all three.
var errPlanned = errors.New("outbox test: run fails on purpose after publishing")

// failures is how many first runs of order number i fail: every 4th order's first run, and
// every 9th order's first two runs.
func failures(i int) int {
	switch {
	case i%9 == 4:
		return 2
	case i%4 == 1:
		return 1
	}
	return 0
}

// TestOutbox: orders delivered 1-3 times, copies racing; some runs fail after they published
// InvoiceCreated to the outbox. The invoice, the inbox claim and the event commit or roll back
// together; the forwarder relays exactly the committed events to the destination.
func TestOutbox(t *testing.T) {
	const orders = 250
	started := time.Now()
	pool := e2e.Pool(t)
	ctx := t.Context()

	s := NewSystem()
	t.Cleanup(func() {
		if err := s.DropTables(context.WithoutCancel(ctx), pool); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	holdTransactionOpen(t, pool)
	p := newProbe(s.Outbox.Table())
	if err := s.Build(ctx, pool, p.handler, p.observe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	dest := newDestination(t, s)
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}

	msgs := placeOrders(t, p, orders)
	publishConcurrently(t, s.Orders, msgs)
	allCommitted := waitForEveryEvent(t, pool, s, p, dest, started)
	if err := s.Close(); err != nil { // waits for the handlers: the probe is final from here
		t.Fatalf("close: %v", err)
	}

	committedRuns, uncertainRuns := p.check(t, len(msgs))
	checkDatabase(t, pool, s, p, committedRuns, uncertainRuns, orders)
	dest.check(t, p, committedRuns, uncertainRuns)
	t.Logf("orders %d, published %d, deliveries %d, runs %d (committed %d, rolled back %d, failed commits %d), duplicates skipped %d, events delivered %d; all committed after %s, all delivered after %s",
		orders, len(msgs), p.deliveries, len(p.runs), p.count(committed), p.count(rolledBack), p.count(commitFail), p.skipped, dest.count(),
		allCommitted.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
}

// holdTransactionOpen keeps an unrelated transaction with an xid open until the test ends,
// as a report or a bulk load might: the forwarder must not wait for it (see Outbox).
func holdTransactionOpen(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	idle, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idle.Rollback(context.WithoutCancel(t.Context())) })
	if _, err := idle.Exec(t.Context(), "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
}

// placeOrders returns the messages of n orders, each 1-3 times, shuffled, and tells the
// probe which runs of each order fail.
func placeOrders(t *testing.T, p *probe, n int) []*message.Message {
	t.Helper()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var msgs []*message.Message
	for i := range n {
		order := OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(1 + rng.IntN(100000))}
		p.fail[order.OrderID] = failures(i)
		for range 1 + rng.IntN(3) {
			msg, err := newOrderMessage(order)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, msg)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return msgs
}

// publishConcurrently publishes msgs from four goroutines, so that copies of one order go
// out at once.
func publishConcurrently(t *testing.T, pub message.Publisher, msgs []*message.Message) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(msgs); i += 4 {
				if err := pub.Publish(OrdersTopic, msgs[i]); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// waitForEveryEvent waits until every order has a committed run, that run's event has
// arrived, and the forwarder has marked every outbox row acked (it does so per batch, after
// relaying it: a router closed before that would leave rows that the next forwarder relays
// again). It returns when, after started, the last order committed.
func waitForEveryEvent(t *testing.T, pool *pgxpool.Pool, s *System, p *probe, dest *destination, started time.Time) time.Duration {
	t.Helper()
	const timeout = 25 * time.Second
	deadline := time.Now().Add(timeout)
	var allCommitted time.Duration
	for {
		committedAll, missing := p.missing(dest)
		if committedAll && allCommitted == 0 {
			allCommitted = time.Since(started)
		}
		if missing == "" {
			var unacked int
			err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+s.Outbox.Table()+" WHERE NOT acked").Scan(&unacked)
			if err != nil {
				t.Fatal(err)
			}
			if unacked == 0 {
				return allCommitted
			}
			missing = fmt.Sprintf("%d outbox rows relayed but not marked acked", unacked)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, missing)
		}
		select {
		case <-time.After(10 * time.Millisecond): // a poll interval, not a synchronisation
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// handlerRun is one run of the router handler for an order; Retry may make several of one
// delivery.
type handlerRun struct {
	orderID string
	ran     bool     // the handler ran (inside the inbox transaction)
	err     error    // what the handler returned
	events  []string // UUIDs of the InvoiceCreated rows this run's transaction wrote
	outcome outcome
}

type outcome int

const (
	skipped    outcome = iota // a duplicate: the inbox acked it without running the handler
	committed                 // the handler and the commit succeeded
	rolledBack                // the handler failed, so the inbox rolled back
	commitFail                // the handler succeeded but the commit returned an error: it may have been durable
	notClaimed                // the inbox returned an error before running the handler
)

// probe records every run and how it ended, seen from outside the inbox: a handler error is a
// rollback; a handler success followed by the middleware's success is a commit.
type probe struct {
	outboxTable string         // quoted
	fail        map[string]int // order ID -> first runs that fail; written before the orders are published

	mu         sync.Mutex
	runs       []*handlerRun  // the runs in which the handler ran
	started    map[string]int // order ID -> handler runs so far
	deliveries int
	skipped    int
	errs       map[string]int // unplanned middleware errors, by message
}

func newProbe(outboxTable string) *probe {
	return &probe{outboxTable: outboxTable, fail: map[string]int{}, started: map[string]int{}, errs: map[string]int{}}
}

type runCtxKey struct{}

// deliveryRuns collects the handler runs of one delivery: Retry, inside observe, runs the
// handler again after a failure, each time in a fresh inbox transaction.
type deliveryRuns struct{ runs []*handlerRun }

// observe is the outermost middleware: it classifies every run of a delivery once the whole
// stack is done. A run that failed rolled back; a run that succeeded but was followed by
// another attempt, or after which the stack failed, had a commit error and may have been
// durable; the last run, if it succeeded and the stack did too, committed.
func (p *probe) observe(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		d := &deliveryRuns{}
		ctx := msg.Context()
		msg.SetContext(context.WithValue(ctx, runCtxKey{}, d))
		out, err := h(msg)
		msg.SetContext(ctx)

		p.mu.Lock()
		defer p.mu.Unlock()
		p.deliveries++
		if len(d.runs) == 0 && err == nil {
			p.skipped++
		}
		for i, r := range d.runs {
			last := i == len(d.runs)-1
			switch {
			case r.err != nil:
				r.outcome = rolledBack
			case !last || err != nil:
				r.outcome = commitFail
			default:
				r.outcome = committed
			}
		}
		if err != nil && !errors.Is(err, errPlanned) {
			p.errs[err.Error()]++
		}
		if len(out) > 0 {
			p.errs[fmt.Sprintf("the handler chain returned %d messages", len(out))]++
		}
		return out, err
	}
}

// handler wraps the example's handler: after it has published, it reads back, in the same
// transaction, the outbox rows this transaction wrote (a row's xmin is the xid of the
// transaction that inserted it), then fails the run if the plan says so.
func (p *probe) handler(h func(*message.Message) error) func(*message.Message) error {
	return func(msg *message.Message) (err error) {
		d, _ := msg.Context().Value(runCtxKey{}).(*deliveryRuns)
		if d == nil {
			return errors.New("outbox test: no probe in the message context")
		}
		r := &handlerRun{ran: true}
		d.runs = append(d.runs, r)
		defer func() { r.err = err }()
		order, err := decodeOrder(msg)
		if err != nil {
			return err
		}
		r.orderID = order.OrderID
		p.mu.Lock()
		p.runs = append(p.runs, r)
		p.started[order.OrderID]++
		n := p.started[order.OrderID]
		p.mu.Unlock()

		if err := h(msg); err != nil {
			return err
		}
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return errNoTransaction
		}
		rows, err := tx.Query(ctx, `SELECT payload->>'uuid' FROM `+p.outboxTable+` WHERE xmin = pg_current_xact_id()::xid`)
		if err != nil {
			return err
		}
		r.events, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if n <= p.fail[order.OrderID] {
			return errPlanned
		}
		return nil
	}
}

// missing says whether every order has committed, and what is still missing before the
// test can stop, or "".
func (p *probe) missing(dest *destination) (committedAll bool, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := map[string]bool{}
	undelivered := 0
	for _, r := range p.runs {
		if r.outcome == committed || r.outcome == commitFail {
			done[r.orderID] = true
			for _, id := range r.events {
				if dest.received(id) == 0 {
					undelivered++
				}
			}
		}
	}
	committedAll = len(done) == len(p.fail)
	if !committedAll || undelivered > 0 {
		return committedAll, fmt.Sprintf("%d of %d orders committed, %d of their events not delivered", len(done), len(p.fail), undelivered)
	}
	return true, ""
}

// count counts the runs that ended with o.
func (p *probe) count(o outcome) int {
	n := 0
	for _, r := range p.runs {
		if r.outcome == o {
			n++
		}
	}
	return n
}

// check asserts, per order, one committed run, which wrote one event, and the planned
// rollbacks, each of which had written its event too. It returns the committed runs and
// those whose commit failed, by event UUID.
func (p *probe) check(t *testing.T, published int) (committedRuns, uncertainRuns map[string]*handlerRun) {
	t.Helper()
	fail := errorf(t)
	committedRuns, uncertainRuns = map[string]*handlerRun{}, map[string]*handlerRun{}
	perOrder := map[string]int{}
	rollbacks := map[string]int{}
	for _, r := range p.runs {
		if len(r.events) != 1 && r.err == nil || len(r.events) > 1 {
			fail("run of order %s wrote %d events in its transaction, want 1", r.orderID, len(r.events))
		}
		switch r.outcome {
		case committed:
			perOrder[r.orderID]++
			for _, id := range r.events {
				committedRuns[id] = r
			}
		case commitFail:
			for _, id := range r.events {
				uncertainRuns[id] = r
			}
		case rolledBack:
			rollbacks[r.orderID]++
			if errors.Is(r.err, errPlanned) && len(r.events) != 1 {
				fail("a failing run of order %s had written %d events before failing, want 1", r.orderID, len(r.events))
			}
		}
	}
	planned := 0
	for id, fails := range p.fail {
		planned += fails
		if perOrder[id] > 1 {
			fail("order %s: %d committed runs, want 1", id, perOrder[id])
		}
		if rollbacks[id] < fails {
			fail("order %s: %d rollbacks, want at least the %d planned", id, rollbacks[id], fails)
		}
	}
	if p.deliveries < published || p.skipped == 0 {
		fail("%d deliveries of %d messages, %d skipped as duplicates: no duplicate was tested", p.deliveries, published, p.skipped)
	}
	if planned == 0 || p.count(rolledBack) < planned {
		fail("%d runs rolled back, %d planned", p.count(rolledBack), planned)
	}
	if len(p.errs) > 0 {
		var msgs []string
		for msg, n := range p.errs {
			msgs = append(msgs, fmt.Sprintf("%dx %s", n, msg))
		}
		sort.Strings(msgs)
		t.Logf("unplanned errors (a commit error makes its run uncertain): %v", msgs)
	}
	return committedRuns, uncertainRuns
}

// checkDatabase asserts one invoice and one inbox row per order, and that the outbox holds
// exactly the events of the committed runs, one per order, addressed to EventsTopic and
// acked by the forwarder.
func checkDatabase(t *testing.T, pool *pgxpool.Pool, s *System, p *probe, committedRuns, uncertainRuns map[string]*handlerRun, orders int) {
	t.Helper()
	fail := errorf(t)
	checkInvoicesAndClaims(t, pool, s, p, orders, fail)
	checkOutbox(t, pool, s, committedRuns, uncertainRuns, orders, fail)
}

// checkInvoicesAndClaims asserts one invoice and one inbox row per order.
func checkInvoicesAndClaims(t *testing.T, pool *pgxpool.Pool, s *System, p *probe, orders int, fail func(string, ...any)) {
	t.Helper()
	invoices, invoiced, err := s.InvoiceCounts(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if invoices != orders || invoiced != orders {
		fail("%d invoices for %d distinct orders, want one for each of %d orders", invoices, invoiced, orders)
	}
	rows, err := pool.Query(t.Context(), "SELECT message_id FROM "+s.InboxTable+" WHERE consumer = $1", s.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, id := range ids {
		keys[id] = true
	}
	missing := 0
	for id := range p.fail {
		if !keys[id] {
			missing++
		}
	}
	if len(ids) != orders || missing > 0 {
		fail("%d inbox rows (%d orders without one), want one per order: %d", len(ids), missing, orders)
	}
}

// checkOutbox asserts that the outbox holds exactly the events of the committed runs, one
// per order, addressed to EventsTopic and acked by the forwarder.
func checkOutbox(t *testing.T, pool *pgxpool.Pool, s *System, committedRuns, uncertainRuns map[string]*handlerRun, orders int, fail func(string, ...any)) {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT payload->>'uuid', payload->>'destination_topic', payload->'metadata'->>'order_id', acked FROM "+s.Outbox.Table())
	if err != nil {
		t.Fatal(err)
	}
	type outboxRow struct {
		UUID, Topic, OrderID string
		Acked                bool
	}
	outboxRows, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	if err != nil {
		t.Fatal(err)
	}
	inOutbox := map[string]bool{}
	perOrder := map[string]int{}
	unacked := 0
	for _, row := range outboxRows {
		if !row.Acked {
			unacked++
		}
		inOutbox[row.UUID] = true
		perOrder[row.OrderID]++
		r := committedRuns[row.UUID]
		if r == nil {
			r = uncertainRuns[row.UUID] // a failed commit that was durable after all
		}
		switch {
		case r == nil:
			fail("outbox row %s (order %s) was written by no committed run", row.UUID, row.OrderID)
		case r.orderID != row.OrderID || row.Topic != EventsTopic:
			fail("outbox row %s: order %s to %q, written by a run of order %s", row.UUID, row.OrderID, row.Topic, r.orderID)
		}
	}
	for id, r := range committedRuns {
		if !inOutbox[id] {
			fail("committed run of order %s: its event %s is not in the outbox", r.orderID, id)
		}
	}
	if len(outboxRows) != orders || len(perOrder) != orders {
		fail("%d outbox rows for %d orders, want one for each of %d orders", len(outboxRows), len(perOrder), orders)
	}
	if unacked > 0 {
		fail("%d outbox rows not acked by the forwarder", unacked)
	}
}

// destination records the InvoiceCreated events the forwarder delivers.
type destination struct {
	mu     sync.Mutex
	events map[string][]InvoiceCreated // event UUID -> each delivery's payload
}

func newDestination(t *testing.T, s *System) *destination {
	d := &destination{events: map[string][]InvoiceCreated{}}
	in, err := s.Events.Subscribe(t.Context(), EventsTopic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for msg := range in {
			var event InvoiceCreated
			if err := json.Unmarshal(msg.Payload, &event); err != nil {
				event.OrderID = "undecodable: " + err.Error()
			}
			d.mu.Lock()
			d.events[msg.UUID] = append(d.events[msg.UUID], event)
			d.mu.Unlock()
			msg.Ack()
		}
	}()
	return d
}

func (d *destination) received(uuid string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events[uuid])
}

func (d *destination) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.events {
		n += len(e)
	}
	return n
}

// check asserts that every order's committed event arrived, and that every event that
// arrived was written by a committed run of its order: none comes from a rolled-back run.
func (d *destination) check(t *testing.T, p *probe, committedRuns, uncertainRuns map[string]*handlerRun) {
	t.Helper()
	fail := errorf(t)
	d.mu.Lock()
	defer d.mu.Unlock()
	ofRolledBack := map[string]*handlerRun{}
	for _, r := range p.runs {
		if r.outcome == rolledBack {
			for _, id := range r.events {
				ofRolledBack[id] = r
			}
		}
	}
	delivered := map[string]bool{} // order IDs
	for id, events := range d.events {
		r := committedRuns[id]
		if r == nil {
			r = uncertainRuns[id]
		}
		switch {
		case ofRolledBack[id] != nil:
			fail("event %s of a rolled-back run of order %s was delivered %d times", id, ofRolledBack[id].orderID, len(events))
			continue
		case r == nil:
			fail("event %s (order %s) was delivered but no committed run wrote it", id, events[0].OrderID)
			continue
		}
		for _, e := range events {
			if e.OrderID != r.orderID {
				fail("event %s delivered for order %q, written for order %s", id, e.OrderID, r.orderID)
			}
		}
		delivered[r.orderID] = true
	}
	for id, r := range committedRuns {
		if len(d.events[id]) == 0 {
			fail("order %s: its committed event %s never arrived", r.orderID, id)
		}
	}
	if len(delivered) != len(p.fail) {
		fail("events arrived for %d orders, want %d", len(delivered), len(p.fail))
	}
	if len(ofRolledBack) == 0 {
		fail("no rolled-back run had written an event: the rollback is not tested")
	}
}

// errorf returns a t.Errorf that reports the first 10 failures only: one broken guarantee
// fails every order.
func errorf(t *testing.T) func(format string, args ...any) {
	n := 0
	return func(format string, args ...any) {
		t.Helper()
		if n++; n <= 10 {
			t.Errorf(format, args...)
		} else if n == 11 {
			t.Errorf("(more failures like these not shown)")
		}
	}
}

// TestOutboxProgram runs the program as .ci/run does, with few orders: one invoice and one
// event per order, though some first runs fail after publishing (run fails otherwise).
func TestOutboxProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

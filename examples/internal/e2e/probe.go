package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/billing"
)

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

package handlertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

const scenarioConcurrent = "concurrent"

// concurrentCopy is one of the copies released at once.
type concurrentCopy struct {
	n int

	mu      sync.Mutex
	current *attempt // in flight, or the last
	acked   bool
	failed  *attempt // nacked with an error no redelivery fixes
	handled int      // deliveries in which the handler ran and whose claim was new
}

func (c *concurrentCopy) state() (current *attempt, acked bool, failed *attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current, c.acked, c.failed
}

// concurrent releases concurrentCopies copies at once, each through a middleware of its own.
func (s *session) concurrent(b *baseline) {
	s.t.Helper()
	consumer := s.consumer(scenarioConcurrent)
	if !s.resetTo(scenarioConcurrent, "", b) {
		return
	}
	copies := make([]*concurrentCopy, concurrentCopies)
	handlers := make([]message.HandlerFunc, concurrentCopies)
	for i := range copies {
		copies[i] = &concurrentCopy{n: i + 1}
		var ok bool
		if handlers[i], ok = s.handler(scenarioConcurrent, consumer); !ok {
			return
		}
	}
	// The copies' context is cancelled only after the deadline's report, which says where
	// each copy was when it came.
	ctx, cancel := context.WithCancel(s.base)
	defer cancel()
	deadline := time.NewTimer(s.o.Deadline)
	defer deadline.Stop()
	release := make(chan struct{})
	var wg sync.WaitGroup
	for _, i := range s.rng.Perm(len(copies)) { // the seed orders the start
		wg.Go(func() {
			<-release
			s.deliverCopy(ctx, handlers[i], copies[i], b, consumer)
		})
	}
	all := make(chan struct{})
	go func() {
		wg.Wait()
		close(all)
	}()
	close(release)
	select {
	case <-all:
	case <-deadline.C:
		s.reportInFlight(copies, cancel, all)
		return // what follows would only repeat it
	}

	handled := 0
	for _, c := range copies {
		_, _, failed := c.state()
		handled += c.handled
		if failed != nil {
			s.report(Problem{Scenario: scenarioConcurrent, Attempt: failed.label,
				What:  "nacked with an error that no redelivery is expected to fix: " + failed.err.Error(),
				Cause: s.nackCause(failed.view(), failed.err, failed.panicked) + retriableHint(failed.err)})
		}
	}
	now, ok := s.snapshot(scenarioConcurrent, "")
	if !ok {
		return
	}
	if diff := differences(now, b.after); diff != nil {
		cause := causeOutsideOrLate
		switch {
		case handled > 1 && !s.writeBehind():
			cause = fmt.Sprintf("the handler ran on %d new claims of one key: an inbox table that does not guard (no primary key on (consumer, message_id))?", handled)
		case s.writeBehind():
			cause = causeNotQueued
		}
		s.report(Problem{Scenario: scenarioConcurrent,
			What:    fmt.Sprintf("%d copies released at once did not leave the state of one delivery:", len(copies)),
			Details: diff, Cause: cause})
	}
}

// deliverCopy delivers one copy until it is acked, redelivering what a redelivery fixes,
// until ctx ends.
func (s *session) deliverCopy(ctx context.Context, h message.HandlerFunc, c *concurrentCopy, b *baseline, consumer string) {
	for i := 1; ctx.Err() == nil; i++ { // cancelled after the deadline
		a := &attempt{label: fmt.Sprintf("copy %d, delivery %d", c.n, i)}
		c.mu.Lock()
		c.current = a
		c.mu.Unlock()
		s.deliverNow(ctx, h, a)
		v := a.view()
		c.mu.Lock()
		if v.ran && !v.duplicate && a.err == nil {
			c.handled++
		}
		switch {
		case a.err == nil:
			c.acked = true
		case ctx.Err() == nil && !s.transient(a.err) && !b.tolerates(a.err, consumer):
			c.failed = a
		}
		done := c.acked || c.failed != nil
		c.mu.Unlock()
		if done {
			return
		}
	}
}

// reportInFlight reports the copies not acked at the deadline, with where each is, then
// cancels their context and waits for them up to another Deadline; if they still run, the
// session stops.
func (s *session) reportInFlight(copies []*concurrentCopy, cancel context.CancelFunc, all <-chan struct{}) {
	s.t.Helper()
	var inFlight []string
	for _, c := range copies {
		if current, ok, failed := c.state(); !ok && failed == nil && current != nil {
			inFlight = append(inFlight, fmt.Sprintf("%s (%s)", current.label, current.currentPhase()))
		}
	}
	s.report(Problem{Scenario: scenarioConcurrent,
		What:    fmt.Sprintf("%d of %d copies still in flight after %s:", len(inFlight), len(copies), s.o.Deadline),
		Details: inFlight,
		Cause: "a handler or a claim that waits for ever: a second connection from a pool that the copies' transactions hold " +
			"(size the pool above the messages in flight), a lock the handler takes in another order than its copies?"})
	cancel()
	timer := time.NewTimer(s.o.Deadline)
	defer timer.Stop()
	select {
	case <-all:
	case <-timer.C:
		s.stopped = true
		s.report(Problem{Scenario: scenarioConcurrent,
			What: fmt.Sprintf("the copies still run %s after their context was cancelled; the run stops here", s.o.Deadline)})
	}
}

// retriableHint points to the store's classification for an error that looks like a race
// the database resolved.
func retriableHint(err error) string {
	text := strings.ToLower(err.Error())
	for _, s := range []string{"deadlock", "lock", "busy", "serializ"} {
		if strings.Contains(text, s) {
			return " (if this is a race the database resolves, the store's IsTransient should report it: a dialect of your own can)"
		}
	}
	return ""
}

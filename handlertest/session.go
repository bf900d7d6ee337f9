package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/cause"
)

// tb is the part of testing.TB handlertest calls.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// session is one call of [Run] or of a scenario: the [Case] with the [Options]' defaults, the
// kit's store around the team's, and what the scenarios share.
type session struct {
	t     tb
	c     Case
	o     Options
	store inbox.Store
	run   string // random, in every consumer name: a rerun on a database that keeps its
	// inbox rows claims afresh
	rng *mathrand.Rand

	ctx    context.Context // the caller's: Snapshot and Reset run under it
	base   context.Context // of every delivery; cancelled when the session ends
	cancel context.CancelFunc

	stopped bool // a delivery hangs, or ctx ended: nothing more runs
	result  Result

	// Every attempt of the session, whose late uses of the inbox transaction and whose
	// statements after the handler returned are reported when they are found (a goroutine
	// may write long after its attempt's checks).
	attemptsMu   sync.Mutex
	attempts     []*attempt
	lateReported map[*attempt]int
	afterSeen    map[*attempt]int
	// The reference delivery's attempts, whose late uses the reference scenario reports.
	referenceAttempts []*attempt
}

// maxDeliveries bounds the redeliveries of one message in a sequential scenario, as a
// broker's redelivery limit would.
const maxDeliveries = 10

// start checks the input and the store, and returns the session; false: a problem of the
// input, in the session's result, stops the run before any delivery.
func start(ctx context.Context, t tb, c Case, opts *Options) (*session, bool) {
	t.Helper()
	o := opts.settings()
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	s := &session{t: t, c: c, o: o, run: hex.EncodeToString(id), ctx: ctx,
		rng:          mathrand.New(mathrand.NewPCG(o.Seed, o.Seed>>1)),
		lateReported: map[*attempt]int{}, afterSeen: map[*attempt]int{}}
	s.result.Seed = o.Seed
	if found := problems(ctx, c, opts); len(found) > 0 {
		for _, p := range found {
			s.report(p)
		}
		return s, false
	}
	s.store = wrapStore(c.Store)
	s.base, s.cancel = context.WithCancel(ctx)
	if c.Config.ConsumerByHandler != nil {
		s.t.Logf("handlertest: Config.ConsumerByHandler is not used (it needs a router); every scenario claims under %q", s.consumer("<scenario>"))
	}
	if !s.followsStore() {
		s.cancel()
		return s, false
	}
	return s, true
}

// end reports the late uses and writes found since the last look, and ends the contexts of
// the session's deliveries.
func (s *session) end() Result {
	s.t.Helper()
	s.reportLate()
	s.cancel()
	return s.result
}

// goingOn reports whether the run goes on: no delivery hangs and ctx has not ended.
func (s *session) goingOn() bool {
	s.t.Helper()
	if s.stopped {
		return false
	}
	if err := s.ctx.Err(); err != nil {
		s.stopped = true
		s.report(Problem{What: "the context ended before every scenario ran: " + err.Error()})
		return false
	}
	return true
}

// transient reports whether a redelivery is expected to get past err, by the store's own
// classification: what production's retry middleware redelivers.
func (s *session) transient(err error) bool {
	classifier, ok := s.c.Store.(interface{ IsTransient(err error) bool })
	return ok && err != nil && classifier.IsTransient(err)
}

func (s *session) writeBehind() bool { return s.c.Config.WriteBehind }

// consumer returns the consumer of one step: Config.Consumer, the run and the step.
func (s *session) consumer(step string) string {
	base := s.c.Config.Consumer
	if base == "" {
		base = "handlertest"
	}
	suffix := "/handlertest-" + s.run + "/" + step
	if room := inbox.MaxConsumerLength - len(suffix); len(base) > room {
		base = base[:room]
		for !utf8.ValidString(base) {
			base = base[:len(base)-1]
		}
	}
	return base + suffix
}

// handler returns the handler under test behind a middleware of its own, claiming under
// consumer: a fresh middleware is what another instance, or a restarted process, has.
func (s *session) handler(scenario, consumer string) (message.HandlerFunc, bool) {
	s.t.Helper()
	config := s.c.Config
	config.Consumer = consumer
	config.ConsumerByHandler = nil
	mw, err := inbox.NewMiddleware(s.store, config, nil)
	if err != nil {
		why := ""
		if errors.Is(err, cause.ErrPublisherMismatch) {
			why = "Config.Publisher was used by a middleware on another store: give the kit an inbox.Publisher of its own (inbox.NewPublisher(recorder))"
		}
		s.report(Problem{Scenario: scenario, What: "inbox.NewMiddleware refused Case.Config: " + err.Error(), Cause: why})
		return nil, false
	}
	return mw(s.runHandler), true
}

// runHandler is the handler the middleware wraps: the team's, with the attempt's phases
// around it, and the injected panic after it.
func (s *session) runHandler(msg *message.Message) ([]*message.Message, error) {
	a, ok := attemptFrom(msg.Context())
	if !ok {
		return s.c.Handler(msg)
	}
	key, _ := inbox.KeyFromContext(msg.Context())
	a.mu.Lock()
	a.ran, a.key, a.phase = true, key, phaseHandler
	a.mu.Unlock()
	defer a.setPhase(phaseReturned) // a panic of the handler's own returns too
	returned, err := s.c.Handler(msg)
	a.setPhase(phaseReturned)
	if err == nil && a.inject.kind == injectPanic {
		a.mu.Lock()
		a.reached = true
		a.mu.Unlock()
		panic(fmt.Errorf("%w: a panic after the handler returned", ErrInjected))
	}
	return returned, err
}

// message returns a fresh copy of the [Case]'s message, as a broker delivers one.
func (s *session) message() *message.Message {
	m := message.NewMessage(s.c.Message.UUID, append([]byte(nil), s.c.Message.Payload...))
	for k, v := range s.c.Message.Metadata {
		m.Metadata.Set(k, v)
	}
	return m
}

// deliver runs one delivery through h, as a router does (a panic is a nack), and waits for
// it up to the Deadline. False: it still runs, and the session stops.
func (s *session) deliver(h message.HandlerFunc, a *attempt) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.deliverNow(s.base, h, a)
	}()
	timer := time.NewTimer(s.o.Deadline)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		s.stopped = true
		return false
	}
}

// deliverNow runs one delivery in the calling goroutine.
func (s *session) deliverNow(ctx context.Context, h message.HandlerFunc, a *attempt) {
	s.track(a)
	msg := s.message()
	msg.SetContext(withAttempt(ctx, a))
	mark := s.o.Recorder.mark()
	defer func() {
		if r := recover(); r != nil {
			a.panicked = r
			a.err = fmt.Errorf("panic: %v", r)
		}
		a.sent = s.o.Recorder.since(mark)
		a.setPhase(phaseDone)
	}()
	a.returned, a.err = h(msg)
}

// outcome is how a message's deliveries ended.
type outcome int

const (
	acked  outcome = iota
	nacked         // with an error no redelivery is expected to fix
	hung
)

// redeliver delivers the message through h until it is acked, redelivering what a
// redelivery fixes (transient) and what the reference delivery also got (b.tolerates): the
// reference scenario reports those. It returns the last attempt.
func (s *session) redeliver(h message.HandlerFunc, label string, b *baseline, consumer string) (*attempt, outcome) {
	var a *attempt
	for i := 1; i <= maxDeliveries; i++ {
		a = &attempt{label: label}
		if i > 1 {
			a.label = fmt.Sprintf("%s, redelivery %d", label, i-1)
		}
		if !s.deliver(h, a) {
			return a, hung
		}
		if a.err == nil {
			return a, acked
		}
		if !s.transient(a.err) && !b.tolerates(a.err, consumer) {
			return a, nacked
		}
	}
	return a, nacked
}

// signature names a nack's error apart from the consumer it names, so that the reference
// delivery's nacks are recognised in other scenarios.
func signature(err error, consumer string) string {
	if errors.Is(err, inbox.ErrTxEndedByHandler) {
		return "the handler ended the inbox transaction"
	}
	return strings.ReplaceAll(err.Error(), consumer, "<consumer>")
}

// snapshot calls [Case.Snapshot], reporting its failure (or panic).
func (s *session) snapshot(scenario, step string) (any, bool) {
	s.t.Helper()
	var v any
	err := s.call(func(ctx context.Context) (err error) {
		v, err = s.c.Snapshot(ctx)
		return err
	})
	if err != nil {
		s.report(Problem{Scenario: scenario, Step: step, What: "Case.Snapshot failed: " + err.Error()})
		return nil, false
	}
	return v, true
}

// reset calls [Case.Reset], then Snapshot, reporting a failure of either.
func (s *session) reset(scenario, step string) (any, bool) {
	s.t.Helper()
	if err := s.call(s.c.Reset); err != nil {
		s.report(Problem{Scenario: scenario, Step: step, What: "Case.Reset failed: " + err.Error()})
		return nil, false
	}
	return s.snapshot(scenario, step)
}

// resetTo calls [Case.Reset] and checks that Snapshot then reads the state of before the
// first delivery. Rows that a second Reset removes were written between Reset and
// Snapshot, by a goroutine of an earlier delivery: handlertest names it, not the Reset, and
// goes on from the state the second Reset left.
func (s *session) resetTo(scenario, step string, b *baseline) bool {
	s.t.Helper()
	now, ok := s.reset(scenario, step)
	if !ok {
		return false
	}
	diff := differences(now, b.before)
	if diff == nil {
		return true
	}
	named := s.reportLate() // what the kit saw of the goroutine, before anything else
	again, ok := s.reset(scenario, step)
	if !ok {
		return false
	}
	if differences(again, b.before) == nil {
		if !named {
			s.report(Problem{Scenario: scenario, Step: step,
				What:    "after Case.Reset, Snapshot read rows that a second Case.Reset removed: they were written between the Reset and the Snapshot:",
				Details: diff, Cause: s.lateWriteCause()})
		}
		return true
	}
	cause := "a Reset that leaves some of the handler's rows (a table it does not empty?)"
	if named {
		cause += ", or the goroutine reported above, still writing"
	}
	s.report(Problem{Scenario: scenario, Step: step, What: "after Case.Reset, Snapshot does not read what it read before the first delivery:",
		Details: diff, Cause: cause})
	return false
}

// call runs one of the team's functions with a bound, turning a panic into an error.
func (s *session) call(f func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.o.Deadline)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f(ctx)
}

// probe calls [Options.Probe], turning a panic into an error.
func (s *session) probe() (keys []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Options.Probe panicked: %v", r)
		}
	}()
	return s.o.Probe(), nil
}

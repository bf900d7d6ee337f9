package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/cause"
)

// session is one call of Run or of a scenario: the Case with its defaults, the kit's store
// around the team's, and what the scenarios share.
type session struct {
	t     TB
	c     Case
	store inbox.Store
	run   string // random, in every consumer name: a rerun on a database that keeps its
	// inbox rows claims afresh
	rng *mathrand.Rand

	base   context.Context // of every delivery; cancelled when the session ends
	cancel context.CancelFunc

	stopped bool // a delivery hangs: nothing more runs

	// The reference delivery's attempts, checked again for late uses when the session ends
	// (a goroutine may use the transaction after the reference's checks).
	referenceAttempts []*attempt
	lateReported      map[*attempt]int
}

// maxDeliveries bounds the redeliveries of one message in a sequential scenario, as a
// broker's redelivery limit would.
const maxDeliveries = 10

func start(t TB, c Case) (*session, bool) {
	t.Helper()
	if err := c.validate(); err != nil {
		t.Errorf("%v", err)
		return nil, false
	}
	c.setDefaults()
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	s := &session{t: t, c: c, store: wrapStore(c.Store), run: hex.EncodeToString(id),
		rng: mathrand.New(mathrand.NewPCG(c.Seed, c.Seed>>1)), lateReported: map[*attempt]int{}}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, true
}

// finish reports the reference's late uses that came after its checks, and ends the
// contexts of the session's deliveries.
func (s *session) finish() {
	s.t.Helper()
	s.reportLate()
	s.cancel()
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
		if errors.Is(err, cause.PublisherMismatch) {
			why = "Config.Publisher was used by a middleware on another store: give the kit an inbox.Publisher of its own (inbox.NewPublisher(recorder))"
		}
		s.report(report{scenario: scenario, what: "inbox.NewMiddleware refused Case.Config: " + err.Error(), cause: why})
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

// message returns a fresh copy of the Case's message, as a broker delivers one.
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
	timer := time.NewTimer(s.c.Deadline)
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
	msg := s.message()
	msg.SetContext(withAttempt(ctx, a))
	mark := s.c.Recorder.mark()
	defer func() {
		if r := recover(); r != nil {
			a.panicked = r
			a.err = fmt.Errorf("panic: %v", r)
		}
		a.sent = s.c.Recorder.since(mark)
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
// redelivery fixes (Retriable) and what the reference delivery also got (b.tolerates): the
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
		if !s.c.Retriable(a.err) && !b.tolerates(a.err, consumer) {
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

// snapshot calls Case.Snapshot, reporting its failure (or panic).
func (s *session) snapshot(scenario, step string) (any, bool) {
	s.t.Helper()
	var v any
	err := s.call(func(ctx context.Context) (err error) {
		v, err = s.c.Snapshot(ctx)
		return err
	})
	if err != nil {
		s.report(report{scenario: scenario, step: step, what: "Case.Snapshot failed: " + err.Error()})
		return nil, false
	}
	return v, true
}

// resetTo calls Case.Reset and checks that Snapshot then reads the state of before the
// first delivery.
func (s *session) resetTo(scenario, step string, b *baseline) bool {
	s.t.Helper()
	if err := s.call(s.c.Reset); err != nil {
		s.report(report{scenario: scenario, step: step, what: "Case.Reset failed: " + err.Error()})
		return false
	}
	now, ok := s.snapshot(scenario, step)
	if !ok {
		return false
	}
	if diff := differences(now, b.before); diff != nil {
		s.report(report{scenario: scenario, step: step, what: "after Case.Reset, Snapshot does not read what it read before the first delivery:",
			details: diff, cause: "a Reset that leaves some of the handler's rows (a table it does not empty?)"})
		return false
	}
	return true
}

// call runs one of the team's functions with a bound, turning a panic into an error.
func (s *session) call(f func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.Deadline)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f(ctx)
}

// probe calls Case.Probe, turning a panic into an error.
func (s *session) probe() (keys []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Case.Probe panicked: %v", r)
		}
	}()
	return s.c.Probe(), nil
}

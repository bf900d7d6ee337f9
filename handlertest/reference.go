package handlertest

import (
	"fmt"
	"strings"
)

// baseline is what the reference delivery left, which the other scenarios compare with.
type baseline struct {
	consumer      string
	before, after any        // the state before and after the delivery
	produced      []Produced // what the acked delivery produced
	statements    []string   // the handler's statements through the transaction
	// nacks are the signatures of the reference delivery's nacks that no redelivery
	// was expected to fix: reported by the reference scenario, redelivered by the others.
	nacks map[string]bool
}

func (b *baseline) tolerates(err error, consumer string) bool {
	return b.nacks[signature(err, consumer)]
}

const scenarioReference = "reference"

// maxRepeats is how often the reference delivers a message that keeps failing the same way
// before it gives up.
const maxRepeats = 3

// reference delivers the message until it is acked and keeps what it left. With check
// set it reports what it saw wrong (the reference scenario); without, it reports only what
// makes the baseline unusable.
func (s *session) reference(check bool) (*baseline, bool) {
	s.t.Helper()
	b := &baseline{consumer: s.consumer(scenarioReference), nacks: map[string]bool{}}
	h, ok := s.handler(scenarioReference, b.consumer)
	if !ok {
		return nil, false
	}
	if b.before, ok = s.reset(scenarioReference, ""); !ok {
		return nil, false
	}
	var ackedAt, last *attempt
	ran := view{}
	repeats := map[string]int{}
	deliveries := 0
	for deliveries < maxDeliveries && ackedAt == nil {
		deliveries++
		a := &attempt{label: fmt.Sprintf("delivery %d", deliveries)}
		last = a
		if check {
			s.referenceAttempts = append(s.referenceAttempts, a)
		}
		if !s.deliver(h, a) {
			s.reportHang(scenarioReference, "", a)
			return nil, false
		}
		v := a.view()
		if v.ran && (a.err == nil || !v.duplicate) {
			ran = v
		}
		if a.err == nil {
			ackedAt = a
			break
		}
		// One delivery at a time races with nothing: a transient error here comes from the
		// handler itself, when it wrote on another connection and waited for its own inbox
		// transaction (SQLite has one writer).
		if s.transient(a.err) && len(v.during()) == 0 {
			continue
		}
		sig := signature(a.err, b.consumer)
		first := len(b.nacks) == 0
		b.nacks[sig] = true
		if check && first {
			s.report(Problem{Scenario: scenarioReference, Attempt: a.label,
				What: "the delivery of the message, with no failure injected, was nacked: " + a.err.Error(), Cause: s.nackCause(v, a.err, a.panicked)})
		}
		if repeats[sig]++; repeats[sig] == maxRepeats {
			break // it will not change
		}
	}
	if ackedAt == nil {
		p := Problem{Scenario: scenarioReference,
			What: fmt.Sprintf("the message was not acked in %d deliveries; the other scenarios need one that is", deliveries)}
		if len(b.nacks) == 0 { // every nack was transient: say what they were
			p.Details = []string{"the last nack (" + last.label + "): " + last.err.Error()}
			p.Cause = "the store reports this error transient, and it does not pass: a table the store cannot use, a lock held elsewhere?"
		}
		s.report(p)
		return nil, false
	}
	b.statements = ran.statements
	if len(b.statements) == 0 {
		s.report(Problem{Scenario: scenarioReference, What: s.noStatements(ran)})
		return nil, false
	}
	how := "ran %d statement(s) through the inbox transaction"
	if s.writeBehind() {
		how = "queued %d statement(s), sent with the claim and the commit"
	}
	s.t.Logf("handlertest: reference: the handler "+how+": %s", len(b.statements), strings.Join(b.statements, "; "))
	if b.after, ok = s.snapshot(scenarioReference, ""); !ok {
		return nil, false
	}
	if differences(b.after, b.before) == nil {
		s.report(Problem{Scenario: scenarioReference,
			What: "Snapshot reads the same before and after the delivery: the kit cannot see what the handler does; make Snapshot read the rows the handler writes"})
		return nil, false
	}
	b.produced = ackedAt.produced()
	s.result.Produced = b.produced
	if check {
		s.checkRecorder(ackedAt)
		s.reportLate()
	}
	return b, true
}

// checkRecorder reports the messages the acked delivery published through Config.Publisher
// that never reached [Options.Recorder]: the inbox recorded them with the claim and sent them
// through the publisher Config.Publisher wraps, which is another one.
func (s *session) checkRecorder(a *attempt) {
	s.t.Helper()
	if s.o.Recorder == nil {
		return
	}
	recorded, ok := publishedIn(a.recordSent())
	if !ok {
		return // a record of another version: nothing to compare with
	}
	if _, missing := compareProduced(a.sent, recorded); len(missing) > 0 {
		s.report(Problem{Scenario: scenarioReference, Attempt: a.label,
			What:    fmt.Sprintf("the handler published %d message(s) through Config.Publisher that never reached Options.Recorder:", len(missing)),
			Details: []string{"published elsewhere: " + describe(missing)}, Cause: causeElsewhere})
		return
	}
	if len(a.sent) == 0 {
		s.t.Logf("handlertest: reference: Options.Recorder saw no message: the handler published none through Config.Publisher " +
			"(a message sent with a broker's publisher directly never passes the inbox, and the kit cannot see it)")
	}
}

// noStatements says why a handler that ran no statement through the inbox transaction is
// refused.
func (s *session) noStatements(v view) string {
	if !v.ran {
		return "the handler never ran (does Config.Skip skip the message?)"
	}
	if s.writeBehind() {
		return "the handler queued no statement (inbox.ExecAtCommit): in write-behind mode its writes must be queued; " +
			"the kit has nothing to fail, and whatever the handler writes is outside the inbox transaction"
	}
	msg := "the handler never used the inbox transaction: it ran no statement through inbox.TxFromContext's transaction " +
		"and queued none with inbox.ExecAtCommit, so the kit has nothing to fail, and whatever the handler writes is outside the " +
		"inbox transaction (a repository on the pool?)"
	if len(v.outside) > 0 {
		msg += "; statements ran on other connections: " + strings.Join(first(v.outside, 3), "; ")
	}
	return msg
}

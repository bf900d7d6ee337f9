package handlertest

import (
	"fmt"
	"strings"
)

// baseline is what the reference delivery left, which the other scenarios compare with.
type baseline struct {
	consumer      string
	before, after any         // the state before and after the delivery
	produced      []Published // what the acked delivery produced
	statements    []string    // the handler's statements through the transaction
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
	if err := s.call(s.c.Reset); err != nil {
		s.report(report{scenario: scenarioReference, what: "Case.Reset failed: " + err.Error()})
		return nil, false
	}
	if b.before, ok = s.snapshot(scenarioReference, ""); !ok {
		return nil, false
	}
	s.lateReported = map[*attempt]int{}
	var ackedAt *attempt
	ran := view{}
	repeats := map[string]int{}
	deliveries := 0
	for deliveries < maxDeliveries && ackedAt == nil {
		deliveries++
		a := &attempt{label: fmt.Sprintf("delivery %d", deliveries)}
		if check {
			s.referenceAttempts = append(s.referenceAttempts, a)
		}
		if !s.deliver(h, a) {
			s.reportHang(scenarioReference, "", a)
			return nil, false
		}
		v := a.view()
		if deliveries == 1 && !s.usable(v) {
			return nil, false
		}
		if v.ran && (a.err == nil || !v.duplicate) {
			ran = v
		}
		if a.err == nil {
			ackedAt = a
			break
		}
		// One delivery at a time races with nothing: a "retriable" error here comes from the
		// handler itself, when it wrote on another connection and waited for its own inbox
		// transaction (SQLite has one writer).
		if s.c.Retriable(a.err) && len(v.during()) == 0 {
			continue
		}
		sig := signature(a.err, b.consumer)
		first := len(b.nacks) == 0
		b.nacks[sig] = true
		if check && first {
			s.report(report{scenario: scenarioReference, attempt: a.label,
				what: "the delivery of the message, with no failure injected, was nacked: " + a.err.Error(), cause: s.nackCause(v, a.err, a.panicked)})
		}
		if repeats[sig]++; repeats[sig] == maxRepeats {
			break // it will not change
		}
	}
	if ackedAt == nil {
		s.report(report{scenario: scenarioReference, what: fmt.Sprintf("the message was not acked in %d deliveries; the other scenarios need one that is", deliveries)})
		return nil, false
	}
	b.statements = ran.statements
	if len(b.statements) == 0 {
		s.report(report{scenario: scenarioReference, what: s.noStatements(ran)})
		return nil, false
	}
	s.t.Logf("handlertest: reference: the handler ran %d statement(s) through the inbox transaction: %s",
		len(b.statements), strings.Join(b.statements, "; "))
	if b.after, ok = s.snapshot(scenarioReference, ""); !ok {
		return nil, false
	}
	if differences(b.after, b.before) == nil {
		s.report(report{scenario: scenarioReference,
			what: "Snapshot reads the same before and after the delivery: the kit cannot see what the handler does; make Snapshot read the rows the handler writes"})
		return nil, false
	}
	b.produced = ackedAt.produced()
	if check {
		s.reportLate()
	}
	return b, true
}

// usable checks that the kit can follow the store's transaction: a pgx.Tx, which it wraps,
// or a transaction on a *sql.DB opened with OpenDB or on Connector (a *sql.Tx, or a data
// layer's over one, sqlinbox.Config.Begin), whose connection it sees.
func (s *session) usable(v view) bool {
	s.t.Helper()
	if s.writeBehind() || v.txType == "" || v.pgx || v.bound { // "": nothing was claimed
		return true
	}
	s.report(report{scenario: scenarioReference,
		what: fmt.Sprintf("the store's transaction is a %s on a *sql.DB the kit does not see: open the *sql.DB of the store "+
			"and of the handler's repositories with handlertest.OpenDB, or with sql.OpenDB(handlertest.Connector(...))", v.txType)})
	return false
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

// reportLate reports the reference's uses of the inbox transaction after the handler
// returned that it has not reported yet.
func (s *session) reportLate() {
	s.t.Helper()
	for _, a := range s.referenceAttempts {
		v := a.view()
		if len(v.late) <= s.lateReported[a] {
			continue
		}
		news := v.late[s.lateReported[a]:]
		s.lateReported[a] = len(v.late)
		s.report(report{scenario: scenarioReference, attempt: a.label,
			what:    fmt.Sprintf("the inbox transaction was used after the handler returned (%d time(s)); the kit refused it:", len(news)),
			details: first(news, 5), cause: causeLate})
	}
}

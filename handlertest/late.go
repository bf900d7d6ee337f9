package handlertest

import (
	"fmt"
	"strings"
)

// A goroutine that the handler starts and that writes after the handler returned is the one
// bug whose evidence comes late: its write lands whenever it lands. The package keeps every
// attempt, and reports what it saw of such a goroutine as soon as it looks again, before
// it blames anything else (a Reset, say) for the state the write left.

// track keeps a for the later looks.
func (s *session) track(a *attempt) {
	s.attemptsMu.Lock()
	defer s.attemptsMu.Unlock()
	s.attempts = append(s.attempts, a)
}

// reportLate reports what the reference delivery's attempts did after their handler
// returned and was not reported yet: uses of the inbox transaction, which handlertest refused,
// and statements with the message's context on other connections (database/sql). It
// returns whether it reported anything.
func (s *session) reportLate() bool {
	s.t.Helper()
	reported := false
	for _, a := range s.referenceAttempts {
		v := a.view()
		if len(v.late) > s.lateReported[a] {
			news := v.late[s.lateReported[a]:]
			s.lateReported[a] = len(v.late)
			s.report(Problem{Scenario: scenarioReference, Attempt: a.label,
				What:    fmt.Sprintf("the inbox transaction was used after the handler returned (%d time(s)); the kit refused it:", len(news)),
				Details: first(news, 5), Cause: causeLate})
			reported = true
		}
		if after := v.after(); len(after) > s.afterSeen[a] {
			news := after[s.afterSeen[a]:]
			s.afterSeen[a] = len(after)
			s.report(Problem{Scenario: scenarioReference, Attempt: a.label,
				What:    fmt.Sprintf("after the handler returned, %d statement(s) ran with the message's context outside the inbox transaction:", len(news)),
				Details: first(trimAfter(news), 5), Cause: causeLate})
			reported = true
		}
	}
	return reported
}

// lateWriteCause is the probable cause of rows written between a Reset and its Snapshot,
// with the statements that every attempt so far ran after its handler returned.
func (s *session) lateWriteCause() string {
	s.attemptsMu.Lock()
	attempts := append([]*attempt(nil), s.attempts...)
	s.attemptsMu.Unlock()
	var after []string
	for _, a := range attempts {
		after = append(after, a.view().after()...)
	}
	if len(after) > 0 {
		return causeLate + "; these ran after it returned: " + strings.Join(first(after, 3), "; ")
	}
	return causeLateUnseen
}

// trimAfter drops the mark of statements made after the handler returned, which a report
// that says so does not need.
func trimAfter(statements []string) []string {
	out := make([]string, len(statements))
	for i, st := range statements {
		out[i] = strings.TrimSuffix(st, afterReturn)
	}
	return out
}

package handlertest

import (
	"fmt"
)

const scenarioCopies = "copies"

// copies delivers sequentialCopies more copies of the reference's message, each through a
// fresh middleware: each is a copy whose first delivery committed but whose ack was lost.
func (s *session) copies(b *baseline) {
	s.t.Helper()
	for i := 1; i <= sequentialCopies; i++ {
		h, ok := s.handler(scenarioCopies, b.consumer)
		if !ok {
			return
		}
		a, out := s.redeliver(h, fmt.Sprintf("copy %d of %d", i, sequentialCopies), b, b.consumer)
		switch out {
		case hung:
			s.reportHang(scenarioCopies, "", a)
			return
		case nacked:
			v := a.view()
			s.report(Problem{Scenario: scenarioCopies, Attempt: a.label,
				What: "a copy of a committed message was nacked: " + a.err.Error(), Cause: s.nackCause(v, a.err, a.panicked)})
			continue
		}
		v := a.view()
		if !v.duplicate {
			s.report(Problem{Scenario: scenarioCopies, Attempt: a.label,
				What:  "the store did not find the message's key committed: the copy was processed as a new message",
				Cause: "a Config.Key that gives another key for the same message, or an inbox table that does not guard (no primary key on (consumer, message_id))?"})
		} else if v.ran && !s.writeBehind() {
			s.report(Problem{Scenario: scenarioCopies, Attempt: a.label, What: "the handler ran for a duplicate"})
		}
		if extra, missing := compareProduced(a.produced(), b.produced); len(extra)+len(missing) > 0 {
			var details []string
			if len(missing) > 0 {
				details = append(details, "not sent again: "+describe(missing))
			}
			if len(extra) > 0 {
				details = append(details, "sent, but not by the first delivery: "+describe(extra))
			}
			s.report(Problem{Scenario: scenarioCopies, Attempt: a.label,
				What:    fmt.Sprintf("the copy produced other messages than the first delivery (%s):", describe(b.produced)),
				Details: details, Cause: producedCause(extra, missing)})
		}
		now, ok := s.snapshot(scenarioCopies, "")
		if !ok {
			return
		}
		if diff := differences(now, b.after); diff != nil {
			cause := "a goroutine of an earlier delivery that writes after the handler returned?"
			if s.writeBehind() {
				cause = causeNotQueued
			}
			s.report(Problem{Scenario: scenarioCopies, Attempt: a.label,
				What: "the copy changed the state that the first delivery left:", Details: diff, Cause: cause})
			return // the next copies would report the same, growing
		}
	}
}

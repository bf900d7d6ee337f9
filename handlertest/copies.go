package handlertest

import (
	"fmt"
)

const scenarioCopies = "copies"

// copies delivers Case.Copies more copies of the reference's message, each through a
// fresh middleware: each is a copy whose first delivery committed but whose ack was lost.
func (s *session) copies(b *baseline) {
	s.t.Helper()
	for i := 1; i <= s.c.Copies; i++ {
		h, ok := s.handler(scenarioCopies, b.consumer)
		if !ok {
			return
		}
		a, out := s.redeliver(h, fmt.Sprintf("copy %d of %d", i, s.c.Copies), b, b.consumer)
		switch out {
		case hung:
			s.reportHang(scenarioCopies, "", a)
			return
		case nacked:
			v := a.view()
			s.report(report{scenario: scenarioCopies, attempt: a.label,
				what: "a copy of a committed message was nacked: " + a.err.Error(), cause: s.nackCause(v, a.err, a.panicked)})
			continue
		}
		v := a.view()
		if !v.duplicate {
			s.report(report{scenario: scenarioCopies, attempt: a.label,
				what:  "the store did not find the message's key committed: the copy was processed as a new message",
				cause: "a Config.Key that gives another key for the same message, or an inbox table that does not guard (no primary key on (consumer, message_id))?"})
		} else if v.ran && !s.writeBehind() {
			s.report(report{scenario: scenarioCopies, attempt: a.label, what: "the handler ran for a duplicate"})
		}
		if extra, missing := compareProduced(a.produced(), b.produced); len(extra)+len(missing) > 0 {
			var details []string
			if len(missing) > 0 {
				details = append(details, "not sent again: "+describe(missing))
			}
			if len(extra) > 0 {
				details = append(details, "sent, but not by the first delivery: "+describe(extra))
			}
			s.report(report{scenario: scenarioCopies, attempt: a.label,
				what:    fmt.Sprintf("the copy produced other messages than the first delivery (%s):", describe(b.produced)),
				details: details, cause: producedCause(extra, missing)})
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
			s.report(report{scenario: scenarioCopies, attempt: a.label,
				what: "the copy changed the state that the first delivery left:", details: diff, cause: cause})
			return // the next copies would report the same, growing
		}
	}
}

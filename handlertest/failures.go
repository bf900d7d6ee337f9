package handlertest

import (
	"errors"
	"fmt"
)

const scenarioFailures = "failures"

// failurePoints are where failures fails a delivery: each statement of the reference, then
// COMMIT, then a panic after the handler returned.
func (b *baseline) failurePoints() []injection {
	points := make([]injection, 0, len(b.statements)+2)
	for i, sql := range b.statements {
		points = append(points, injection{kind: injectStatement, k: i + 1, of: len(b.statements), sql: sql})
	}
	return append(points, injection{kind: injectCommit}, injection{kind: injectPanic})
}

// failures fails one delivery at each point, on a fresh consumer and a reset state, then
// redelivers it.
func (s *session) failures(b *baseline) {
	s.t.Helper()
	for i, point := range b.failurePoints() {
		if !s.failAt(b, point, s.consumer(fmt.Sprintf("failures-%d", i+1))) {
			return
		}
	}
}

// failAt runs one failure point; false stops the scenario (a hang, a Snapshot that fails).
func (s *session) failAt(b *baseline, point injection, consumer string) bool {
	s.t.Helper()
	step := point.String()
	h, ok := s.handler(scenarioFailures, consumer)
	if !ok || !s.resetTo(scenarioFailures, step, b) {
		return false
	}
	a := &attempt{label: "attempt 1", inject: point}
	if !s.deliver(h, a) {
		s.reportHang(scenarioFailures, step, a)
		return false
	}
	v := a.view()
	switch {
	case a.err == nil && point.kind == injectStatement:
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: a.label,
			What:  "the delivery was acked although one of its statements failed",
			Cause: causeIgnoredError})
	case !v.reached:
		what := "the injected failure was never reached: the delivery was nacked before it: " + errText(a.err)
		if point.kind == injectStatement {
			what = fmt.Sprintf("the injected failure was never reached: the handler ran %d statement(s) this time, the reference %d (nack: %s)",
				len(v.statements), point.of, errText(a.err))
		}
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: a.label, What: what, Cause: causeNotDeterminist})
	}
	now, ok := s.snapshot(scenarioFailures, step)
	if !ok {
		return false
	}
	v = a.view() // with what a goroutine of the attempt did until Snapshot returned
	survived := differences(now, b.before)
	if survived != nil {
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: a.label,
			What:    "the delivery was nacked, but the state is not the state of before it:",
			Details: survived, Cause: s.survivedCause(v)})
	}

	again, out := s.redeliver(h, "attempt 2 (the redelivery)", b, consumer)
	switch out {
	case hung:
		s.reportHang(scenarioFailures, step, again)
		return false
	case nacked:
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: again.label,
			What: "the redelivery after the failure was nacked: " + again.err.Error(), Cause: s.nackCause(again.view(), again.err, again.panicked)})
	}
	if len(a.sent) > 0 {
		details := []string{"sent by the failed Attempt: " + describe(a.sent)}
		cause := causeSentEarly
		if out == acked {
			details = append(details, "sent by the redelivery: "+describe(again.sent))
			if extra, _ := compareProduced(again.sent, a.sent); len(extra) > 0 {
				cause = causeNewUUID + "; it left before the commit, although the delivery failed"
			}
		}
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: a.label,
			What:    fmt.Sprintf("the nacked attempt published %d message(s):", len(a.sent)),
			Details: details, Cause: cause})
	}
	if out != acked {
		return true
	}
	now, ok = s.snapshot(scenarioFailures, step)
	if !ok {
		return false
	}
	// What survived the failed attempt and stays is reported above; anything else is new.
	if diff := differences(now, b.after); diff != nil && survived == nil {
		s.report(Problem{Scenario: scenarioFailures, Step: step, Attempt: again.label,
			What:    "after the redelivery the state is not the state the reference delivery left:",
			Details: diff, Cause: s.survivedCause(again.view())})
	}
	return true
}

func errText(err error) string {
	if err == nil {
		return "none, it was acked"
	}
	if errors.Is(err, ErrInjected) {
		return "the injected failure"
	}
	return err.Error()
}

package handlertest

import (
	"fmt"
	"strings"
)

const scenarioExternal = "external"

// external runs the attempts in which a handler calls an external system again (a failed
// COMMIT, its redelivery and, in write-behind mode, a copy) and checks the keys [Options.Probe]
// saw in each.
func (s *session) external(b *baseline) {
	s.t.Helper()
	if s.o.Probe == nil {
		s.t.Logf("handlertest: external: skipped, Options.Probe is nil")
		return
	}
	consumer := s.consumer(scenarioExternal)
	h, ok := s.handler(scenarioExternal, consumer)
	if !ok || !s.resetTo(scenarioExternal, "", b) {
		return
	}
	type call struct {
		a    *attempt
		keys []string
	}
	var calls []call
	attempts := []*attempt{{label: "attempt 1 (COMMIT fails)", inject: injection{kind: injectCommit}}, {label: "attempt 2 (the redelivery)"}}
	if s.writeBehind() {
		attempts = append(attempts, &attempt{label: "attempt 3 (a copy, which write-behind mode runs the handler for)"})
	}
	for _, a := range attempts {
		before, err := s.probe()
		if err != nil {
			s.report(Problem{Scenario: scenarioExternal, Attempt: a.label, What: err.Error()})
			return
		}
		if !s.deliver(h, a) {
			s.reportHang(scenarioExternal, "", a)
			return
		}
		after, err := s.probe()
		if err != nil {
			s.report(Problem{Scenario: scenarioExternal, Attempt: a.label, What: err.Error()})
			return
		}
		if len(after) < len(before) {
			before = nil // the fake forgot its calls: all it has are this attempt's
		}
		calls = append(calls, call{a, after[len(before):]})
	}

	inboxKey := calls[0].a.view().key
	total := 0
	var others []string
	distinct := map[string]bool{}
	for _, c := range calls {
		total += len(c.keys)
		for _, key := range c.keys {
			switch key {
			case "":
				s.report(Problem{Scenario: scenarioExternal, Attempt: c.a.label,
					What: "the handler called an external system without an idempotency key", Cause: causeNoKey})
			case inboxKey:
			default:
				others = append(others, fmt.Sprintf("%s: %q", c.a.label, key))
				distinct[key] = true
			}
		}
	}
	if len(others) > 0 {
		cause := causeOtherKey
		if len(distinct) == 1 {
			cause = causeOwnKey
		}
		s.report(Problem{Scenario: scenarioExternal,
			What:    fmt.Sprintf("the handler called an external system with keys other than inbox.KeyFromContext's (%q):", inboxKey),
			Details: others, Cause: cause})
	}
	if total == 0 {
		// A handler whose external call depends on the message makes none for this one; a
		// Probe on a fake the handler does not call looks the same, so handlertest says so and
		// passes.
		labels := make([]string, len(calls))
		for i, c := range calls {
			labels[i] = c.a.label
		}
		s.t.Logf("handlertest: external: Options.Probe saw no call in %s: nothing to check for this message "+
			"(if the handler calls an external system for it, Probe is not the fake it calls)", strings.Join(labels, ", "))
	}
}

package handlertest

import (
	"fmt"
	"strings"
)

const scenarioExternal = "external"

// external runs the attempts in which a handler calls an external system again (a failed
// COMMIT, its redelivery and, in write-behind mode, a copy) and checks the keys Case.Probe
// saw in each.
func (s *session) external(b *baseline) {
	s.t.Helper()
	if s.c.Probe == nil {
		s.t.Logf("handlertest: external: skipped, Case.Probe is nil")
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
			s.report(report{scenario: scenarioExternal, attempt: a.label, what: err.Error()})
			return
		}
		if !s.deliver(h, a) {
			s.reportHang(scenarioExternal, "", a)
			return
		}
		after, err := s.probe()
		if err != nil {
			s.report(report{scenario: scenarioExternal, attempt: a.label, what: err.Error()})
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
				s.report(report{scenario: scenarioExternal, attempt: c.a.label,
					what: "the handler called an external system without an idempotency key", cause: causeNoKey})
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
		s.report(report{scenario: scenarioExternal,
			what:    fmt.Sprintf("the handler called an external system with keys other than inbox.KeyFromContext's (%q):", inboxKey),
			details: others, cause: cause})
	}
	if total == 0 {
		labels := make([]string, len(calls))
		for i, c := range calls {
			labels[i] = c.a.label
		}
		s.report(report{scenario: scenarioExternal,
			what: "Case.Probe saw no call in " + strings.Join(labels, ", ") + ": is it the fake that the handler calls?"})
	}
}

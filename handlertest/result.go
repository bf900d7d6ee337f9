package handlertest

import "strings"

// Result is what a run found. Each of its Problems was also reported with t.Errorf, in the
// same words ([Problem.String], followed by the run and the seed).
type Result struct {
	// Problems are what handlertest found wrong, in the order it found them; none for a handler
	// that passed.
	Problems []Problem

	// Produced are the messages the acked reference delivery produced: those the handler
	// returned (Topic "") and, with [Options.Recorder], those that reached the [Recorder]. Nil
	// when the reference delivery was never acked.
	Produced []Produced

	// Seed is the seed the run ordered its concurrent copies with: [Options.Seed], or the one
	// taken from the clock. Give it as Options.Seed to run the same order again.
	Seed uint64
}

// Problem is one thing handlertest found wrong, in parts a test or a CI dashboard can tell apart.
type Problem struct {
	// Scenario is the scenario that found it: "reference", "copies", "concurrent",
	// "failures" or "external"; "" for a problem of the input, found before any delivery
	// (a field missing, a store whose transactions handlertest cannot follow).
	Scenario string

	// Step is the failure handlertest injected, such as "COMMIT fails" or "statement 2 of 3
	// fails (INSERT ...)"; "" where it injected none.
	Step string

	// Attempt is the delivery that showed it, such as "delivery 1", "attempt 2 (the
	// redelivery)" or "copy 2 of 3"; "" for what the scenario saw as a whole.
	Attempt string

	// What is what handlertest saw, in one sentence.
	What string

	// Details are the lines that go with What: the difference of the snapshot as paths
	// ("Invoices: 2 rows, want 1"), the messages sent or not sent again, the statements
	// refused, the copies in flight; nil where there are none.
	Details []string

	// Cause is the probable cause, with what handlertest saw that points to it; "" where the
	// kit has no guess.
	Cause string
}

// String is the problem as handlertest reports it:
//
//	handlertest: SCENARIO (STEP), ATTEMPT: WHAT
//		DETAIL...
//		probable cause: CAUSE
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString("handlertest: ")
	if p.Scenario != "" {
		b.WriteString(p.Scenario)
		if p.Step != "" {
			b.WriteString(" (" + p.Step + ")")
		}
		if p.Attempt != "" {
			b.WriteString(", " + p.Attempt)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.What)
	for _, d := range p.Details {
		b.WriteString("\n\t" + d)
	}
	if p.Cause != "" {
		b.WriteString("\n\tprobable cause: " + p.Cause)
	}
	return b.String()
}

package integration

import (
	"slices"
	"strings"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
)

// The kit's edges that a team found from outside: a Recorder that saw nothing, a goroutine
// that writes between the kit's Reset and its Snapshot, a Probe of a handler that makes no
// external call for this message, and reports a test can read in parts.

// A handler that publishes through an inbox.Publisher over another publisher than the
// Recorder (the broker's) is reported: the inbox recorded its message with the claim, and
// the Recorder never saw it. Before, the Recorder saw nothing, the copies sent again what
// the first sent (nothing, to it), and the run passed.
func TestHandlerKitReportsARecorderThatSawNothing(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		broker := handlertest.NewRecorder() // stands for the broker's publisher
		elsewhere, err := inbox.NewPublisher(broker)
		if err != nil {
			t.Fatal(err)
		}
		c, opts := f.kitCase(t, f.publishesElsewhere(elsewhere), false)
		c.Config.Publisher = elsewhere
		rec := &recordingTB{TB: t}
		res := handlertest.Run(t.Context(), rec, c, opts)
		reports := rec.reports()
		if got := scenariosOf(reports); !slices.Equal(got, []string{"reference"}) {
			t.Errorf("reported by %q, want reference:\n%s", got, strings.Join(reports, "\n"))
		}
		want := "handlertest: reference, delivery 1: the handler published 1 message(s) through Config.Publisher that never reached Options.Recorder:\n" +
			"\tpublished elsewhere: "
		if len(reports) != 1 || !strings.HasPrefix(reports[0], want) ||
			!strings.Contains(reports[0], "probable cause: Config.Publisher wraps another publisher than Options.Recorder (the broker's?)") {
			t.Errorf("reports %q, want one starting %q", reports, want)
		}
		if len(broker.Messages()) == 0 {
			t.Error("the handler's messages did not reach the broker's publisher: the test does not test what it says")
		}
		if len(res.Problems) != 1 || res.Problems[0].Cause == "" {
			t.Errorf("Result.Problems = %+v, want the one report", res.Problems)
		}
	})
}

// A goroutine that writes after its handler returned, at the worst moment (after the kit's
// Reset deleted the rows, before its Snapshot read them), is named first, and no report
// blames the Reset. Before, the first report was "after Case.Reset, Snapshot does not read
// what it read before the first delivery ... a Reset that leaves some of the handler's
// rows", and the concurrent scenario stopped there.
func TestHandlerKitNamesALateGoroutineBeforeTheReset(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		t.Cleanup(f.afterReset.settle) // the last goroutines, before the tables are dropped
		c, opts := f.kitCase(t, f.auditAfterTheNextReset(), false)
		rec := &recordingTB{TB: t}
		handlertest.Run(t.Context(), rec, c, opts)
		reports := rec.reports()
		if len(reports) == 0 {
			t.Fatal("no report")
		}
		want := "handlertest: concurrent: after Case.Reset, Snapshot read rows that a second Case.Reset removed: they were written between the Reset and the Snapshot:\n" +
			"\tAudit: 1 rows, want 0 (extra: {OrderID:order-1 Cents:1250})\n" +
			"\tprobable cause: a goroutine of an earlier delivery that writes after its handler returned"
		if !f.pgx {
			// database/sql: the kit saw the goroutine's statement, with the message's context.
			want = "handlertest: reference, delivery 1: after the handler returned, 1 statement(s) ran with the message's context outside the inbox transaction:\n" +
				"\t" + f.placeholders(insert(f.audit)) + "\n" +
				"\tprobable cause: a goroutine that writes after the handler returned"
		}
		if !strings.HasPrefix(reports[0], want) {
			t.Errorf("the first report is\n%s\nwant one starting\n%s", reports[0], want)
		}
		for _, r := range reports {
			if strings.Contains(r, "a Reset that leaves some of the handler's rows") {
				t.Errorf("a report blames the Reset:\n%s", r)
			}
		}
		t.Logf("%d report(s); the first:\n%s", len(reports), reports[0])
	})
}

// A handler whose external call depends on the message, given a message that needs none,
// passes with Options.Probe set: the kit logs that it saw no call. Before, it was reported
// ("Case.Probe saw no call in attempt 1 (COMMIT fails), attempt 2 (the redelivery): is it
// the fake that the handler calls?"), so one Case setup could not serve such a handler's
// messages. A handler that calls without the key is still reported
// (TestHandlerKitCatchesBuggyHandlers).
func TestHandlerKitAllowsAProbeThatSawNoCall(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		c, opts := f.kitCase(t, f.chargesLargeOrders(), false)
		rec := &recordingTB{TB: t}
		res := handlertest.Run(t.Context(), rec, c, opts)
		if reports := rec.reports(); len(reports) > 0 || len(res.Problems) > 0 {
			t.Errorf("reported:\n%s", strings.Join(reports, "\n"))
		}
		if !slices.ContainsFunc(rec.logs, func(l string) bool {
			return strings.HasPrefix(l, "handlertest: external: Options.Probe saw no call in attempt 1 (COMMIT fails), attempt 2 (the redelivery): nothing to check for this message")
		}) {
			t.Errorf("the kit did not log the Probe's silence; it logged %q", rec.logs)
		}
		if len(f.payments.seen()) != 0 {
			t.Error("the handler charged: the test does not test what it says")
		}
	})
}

// Each report is also in the Result, in parts: the scenario, the failure injected, the
// attempt, the difference and the probable cause, and reads as the report does. Before,
// Run returned nothing, and a test had only the text of t.Errorf.
func TestHandlerKitResultHasTheReportsInParts(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		c, opts := f.kitCase(t, f.ledgerOnThePool(), false)
		rec := &recordingTB{TB: t}
		res := handlertest.Run(t.Context(), rec, c, opts)
		reports := rec.reports()
		if len(res.Problems) != len(reports) || len(reports) == 0 {
			t.Fatalf("%d problems for %d reports", len(res.Problems), len(reports))
		}
		for i, p := range res.Problems {
			if !strings.HasPrefix(reports[i], p.String()+"\n\t(run ") {
				t.Errorf("problem %d reads\n%s\nreported as\n%s", i, p.String(), reports[i])
			}
			if !strings.HasPrefix(reports[i], "handlertest: "+p.Scenario) {
				t.Errorf("problem %d: scenario %q, reported as %q", i, p.Scenario, reports[i])
			}
		}
		if f.sqlite {
			return // the reference itself is nacked there (TestHandlerKitCatchesBuggyHandlers)
		}
		p := res.Problems[0]
		if p.Scenario != "failures" || p.Step != "COMMIT fails" || p.Attempt != "attempt 1" ||
			!slices.Equal(p.Details, []string{"Ledger: 1 rows, want 0 (extra: {OrderID:order-1 Cents:1250})"}) ||
			!strings.HasPrefix(p.Cause, "a write outside the inbox transaction: a repository on the pool") {
			t.Errorf("the first problem is %+v", p)
		}
		if res.Seed == 0 {
			t.Error("Result.Seed is 0")
		}
	})
}

package handlertest

import (
	"errors"
	"fmt"
	"strings"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/cause"
)

// report keeps p in the session's result and reports it with t.Errorf, with the run and
// the seed that reproduce it.
func (s *session) report(p Problem) {
	s.t.Helper()
	s.result.Problems = append(s.result.Problems, p)
	s.t.Errorf("%s\n\t(run %s, seed %d)", p.String(), s.run, s.o.Seed)
}

// reportHang reports a delivery still in flight after the Deadline; the session stops.
func (s *session) reportHang(scenario, step string, a *attempt) {
	s.t.Helper()
	s.report(Problem{Scenario: scenario, Step: step, Attempt: a.label,
		What: fmt.Sprintf("the delivery is still in flight after %s (%s); the run stops here", s.o.Deadline, a.currentPhase()),
		Cause: "a handler or a claim that waits for ever: a second connection from a pool the delivery's transaction holds, " +
			"a lock another transaction keeps, a channel nobody sends on?"})
}

// Probable causes, in the words the reports use.
const (
	causeEndedByHandler = "the handler ended the inbox transaction itself (its data layer's Commit?): leave Commit and Rollback to the middleware"
	causeOutside        = "a write outside the inbox transaction: a repository on the pool?"
	causeOutsideOrLate  = "a write outside the inbox transaction: a repository on the pool, or a goroutine that writes after the handler returned?"
	causeLate           = "a goroutine that writes after the handler returned: write before returning, through the inbox transaction"
	causeLateUnseen     = "a goroutine of an earlier delivery that writes after its handler returned (through the pool, whose statements the kit sees on database/sql only)?"
	causeElsewhere      = "Config.Publisher wraps another publisher than Options.Recorder (the broker's?): build it with inbox.NewPublisher(recorder), and give the handler that Publisher"
	causeNotQueued      = "a write outside inbox.ExecAtCommit: in write-behind mode the handler runs for every copy too, and only what it queues is dropped or rolled back (a repository on the pool?)"
	causeNewUUID        = "a message published with a new UUID on each attempt: publish through inbox.NewPublisher (with the handler's context), or return the message"
	causeNotRecorded    = "a message published outside inbox.NewPublisher (with the broker's publisher?): the inbox did not record it, so a copy does not send it again; publish through inbox.NewPublisher, or return the message"
	causeSentEarly      = "a message published with the broker's publisher (or under inbox.WithPublishNow): it leaves before the commit, even when the handler then fails; publish through inbox.NewPublisher with the handler's context"
	causeNoKey          = "an external call without inbox.KeyFromContext's key: pass it as the idempotency key, so that the external system recognises a redelivery"
	causeOtherKey       = "a new key on each attempt: pass inbox.KeyFromContext's key, the same for every copy and redelivery of the message"
	causeOwnKey         = "an idempotency key of the handler's own, not inbox.KeyFromContext's: two messages with the same business data would share it, and a key built per call changes on every attempt"
	causeIgnoredError   = "the handler goes on after a failed statement: return the error, so that the message is nacked and the transaction rolled back"
	causeNotDeterminist = "the handler's path depends on something other than the message and the state Reset restores (the clock, randomness, another table)?"
)

// nackCause is the probable cause of a nack, from its error and what the attempt saw.
func (s *session) nackCause(v view, err error, panicked any) string {
	switch {
	case s.transient(err) && len(v.during()) > 0:
		return causeOutside + " While the handler ran, these ran on other connections: " + strings.Join(first(v.during(), 3), "; ") +
			"; they waited for the inbox transaction's own locks, which the handler holds (SQLite has one writer): the handler deadlocks with itself"
	case v.ended != "" || errors.Is(err, inbox.ErrTxEndedByHandler):
		if v.ended != "" {
			return causeEndedByHandler + fmt.Sprintf(" (the handler called %s on it)", v.ended)
		}
		return causeEndedByHandler
	case errors.Is(err, inbox.ErrNoPublisher):
		return "set Config.Publisher to the inbox.Publisher the handler publishes through"
	case errors.Is(err, cause.ErrAfterReturn) || errors.Is(err, ErrUsedAfterReturn):
		return causeLate
	case errors.Is(err, cause.ErrNotFromMiddleware):
		return "inbox.ExecAtCommit with a context that is not the handler's (msg.Context())"
	case errors.Is(err, inbox.ErrNoHandlerContext):
		return "a message published through inbox.Publisher without the handler's context: call msg.SetContext(handlerMsg.Context()) on it"
	case errors.Is(err, cause.ErrPublisherMismatch):
		return "Config.Publisher is not the inbox.Publisher the handler publishes through, or it was used with another store"
	case panicked != nil:
		return "the handler panicked"
	}
	return ""
}

// survivedCause is the probable cause of a state that changed although its delivery was
// nacked, from what the attempt saw.
func (s *session) survivedCause(v view) string {
	during, after := v.during(), v.after()
	switch {
	case v.ended != "":
		return causeEndedByHandler + fmt.Sprintf(" (the handler called %s on it: what it wrote before committed on its own)", v.ended)
	case len(during) > 0 && s.writeBehind():
		return causeNotQueued + "; while the handler ran, these ran outside the store: " + strings.Join(first(during, 3), "; ")
	case len(during) > 0:
		return causeOutside + " While the handler ran, these ran on other connections: " + strings.Join(first(during, 3), "; ")
	case len(after) > 0:
		return causeLate + "; these ran after it returned: " + strings.Join(first(after, 3), "; ")
	case s.writeBehind():
		return causeNotQueued + ", or a goroutine that writes after the handler returned?"
	}
	return causeOutsideOrLate
}

// afterReturn marks the outside statements made after the handler returned.
const afterReturn = " (after the handler returned)"

// during returns the statements on other connections while the handler ran.
func (v view) during() []string {
	var out []string
	for _, o := range v.outside {
		if !strings.HasSuffix(o, afterReturn) {
			out = append(out, o)
		}
	}
	return out
}

// after returns the statements on other connections after the handler returned.
func (v view) after() []string {
	var out []string
	for _, o := range v.outside {
		if strings.HasSuffix(o, afterReturn) {
			out = append(out, o)
		}
	}
	return out
}

func first(list []string, n int) []string {
	if len(list) > n {
		return append(list[:n:n], fmt.Sprintf("(%d more)", len(list)-n))
	}
	return list
}

// describe lists messages for a report.
func describe(messages []Produced) string {
	parts := make([]string, 0, len(messages))
	for _, m := range messages {
		topic := "returned"
		if m.Topic != "" {
			topic = "topic " + m.Topic
		}
		parts = append(parts, fmt.Sprintf("%q (%s)", m.UUID, topic))
	}
	return strings.Join(parts, ", ")
}

// compareProduced returns the messages only got has and those only want has, matched by
// topic, UUID and payload.
func compareProduced(got, want []Produced) (extra, missing []Produced) {
	id := func(m Produced) string { return m.Topic + "\x00" + m.UUID + "\x00" + string(m.Payload) }
	left := map[string]int{}
	for _, m := range want {
		left[id(m)]++
	}
	for _, m := range got {
		if left[id(m)] > 0 {
			left[id(m)]--
			continue
		}
		extra = append(extra, m)
	}
	for _, m := range want {
		if left[id(m)] > 0 {
			left[id(m)]--
			missing = append(missing, m)
		}
	}
	return extra, missing
}

// producedCause is the probable cause of produced messages that differ between copies.
func producedCause(extra, missing []Produced) string {
	if len(extra) > 0 {
		return causeNewUUID
	}
	if len(missing) > 0 {
		return causeNotRecorded
	}
	return ""
}

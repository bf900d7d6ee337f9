package handlertest

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Case is one handler under test and what handlertest needs around it. Handler, Store,
// Message, Snapshot and Reset are required; Config's zero value is the middleware's defaults.
type Case struct {
	// Handler is the handler under test, as it is registered behind the inbox middleware.
	// The package runs it behind [inbox.NewMiddleware] itself, outside any router.
	Handler message.HandlerFunc

	// Store is the inbox store, on the real database the handler writes to. A pgx store
	// (sqlinbox.NewPgx) needs nothing more: handlertest hands the handler a pgx.Tx of its own
	// that counts and fails statements. A database/sql store (sqlinbox.NewDB,
	// sqlinbox.NewMultiStatement) must run on a *sql.DB opened with [OpenDB] or on
	// [Connector], and so must the handler's repositories: handlertest counts and fails
	// statements in those connections, and checks that it sees them before any delivery.
	// The package redelivers a nack that the store's IsTransient(err) bool method reports
	// transient (a deadlock, a lock timeout, a busy database), as a production stack retries
	// it; a store without that method gets no redelivery.
	Store inbox.Store

	// Config is the middleware's configuration, as in production (WriteBehind, Key,
	// Publisher, ...), with two changes handlertest makes and logs: each scenario claims under a
	// consumer of its own, Config.Consumer (or "handlertest" if it is empty) followed by
	// "/handlertest-<run>/<scenario>", so that the message is new to the inbox in each; and
	// ConsumerByHandler is not used, since it needs a router's handler name.
	Config inbox.Config

	// Message is the message every scenario delivers: each delivery is a copy with the same
	// UUID, payload and metadata, so the handler and the Probe see the same values every
	// time.
	Message *message.Message

	// Snapshot reads the business state the handler changes (rows of its tables, say) and
	// returns it as a value that reflect.DeepEqual compares: leave out what differs between
	// two runs of the same delivery (generated IDs, timestamps). It reads through the pool,
	// outside any inbox transaction. The package reports a difference as paths, such as
	// "Invoices: 2 rows, want 1".
	Snapshot func(ctx context.Context) (any, error)

	// Reset restores the business state of before any delivery (DELETE FROM the handler's
	// tables, say); handlertest calls it before every scenario and every injected failure, and
	// checks that Snapshot then reads what it read before the first delivery. It need not
	// touch the inbox table: each scenario claims under a consumer of its own.
	Reset func(ctx context.Context) error
}

// Options are the optional expectations and settings of a run. A nil *Options is the zero
// Options.
type Options struct {
	// Recorder is the publisher that Config.Publisher wraps (inbox.NewPublisher(recorder)),
	// which the handler, or its cqrs buses, publish through: handlertest then checks what the
	// handler publishes, and that it all reaches the Recorder. No assertion is made on
	// published messages if left nil: handlertest checks only the messages the handler returns.
	Recorder *Recorder

	// Probe returns every idempotency key that the handler's fakes of systems outside the
	// database (a payment client, say) were called with, in order; "" for a call without
	// one. The [External] scenario checks that every call, in every attempt, passed
	// [inbox.KeyFromContext]'s key. A handler that makes no call for this message passes (the
	// kit logs it). No assertion is made on external calls if left nil.
	Probe func() []string

	// Deadline bounds each delivery, each call of Snapshot and Reset, and the concurrent
	// copies as a whole: a delivery still in flight then is reported as a hang, and the run
	// stops. Zero: 10 s.
	Deadline time.Duration

	// Seed orders the start of the concurrent copies, the one random choice handlertest makes;
	// [Result.Seed] and every report give it, to run the same order again. Zero: a seed from
	// the clock.
	Seed uint64
}

// How many copies the [Copies] and [Concurrent] scenarios deliver, and the default Deadline.
const (
	sequentialCopies = 3
	concurrentCopies = 4
	defaultDeadline  = 10 * time.Second
)

// settings are the [Options] with their defaults.
func (o *Options) settings() Options {
	var s Options
	if o != nil {
		s = *o
	}
	if s.Deadline == 0 {
		s.Deadline = defaultDeadline
	}
	if s.Seed == 0 {
		s.Seed = uint64(time.Now().UnixNano())
	}
	return s
}

// problems returns every problem of the input at once, so that a team fixes its [Case] in one
// go.
func problems(ctx context.Context, c Case, o *Options) []Problem {
	var found []string
	if ctx == nil {
		found = append(found, "the context is nil: pass the test's (t.Context())")
	}
	if c.Handler == nil {
		found = append(found, "Case.Handler is nil: give the handler under test")
	}
	if c.Store == nil {
		found = append(found, "Case.Store is nil: give the inbox store, on the real database")
	}
	if c.Message == nil {
		found = append(found, "Case.Message is nil: give the message to deliver")
	} else if c.Config.Key == nil && c.Message.UUID == "" {
		found = append(found, "Case.Message has no UUID, which is its idempotency key (Config.Key is not set)")
	}
	if c.Snapshot == nil {
		found = append(found, "Case.Snapshot is nil: give a function that reads the business state the handler changes")
	}
	if c.Reset == nil {
		found = append(found, "Case.Reset is nil: give a function that restores the business state of before any delivery")
	}
	if o != nil {
		if o.Deadline < 0 {
			found = append(found, "Options.Deadline is negative: give a positive bound, or zero for 10 s")
		}
		if o.Recorder != nil && c.Config.Publisher == nil {
			found = append(found, "Options.Recorder is set but Config.Publisher is nil: the Recorder sees what the handler publishes "+
				"only as the publisher that Config.Publisher wraps (inbox.NewPublisher(recorder))")
		}
	}
	out := make([]Problem, len(found))
	for i, what := range found {
		out[i] = Problem{What: what}
	}
	return out
}

package handlertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// TB is the part of testing.TB the kit uses; *testing.T and *testing.B satisfy it. The kit
// never calls Fatal: it reports what it found with Errorf and returns, so a TB of your own
// (one that records the messages, say) sees every report.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Case is one handler under test and what the kit needs around it. Handler, Store, Message,
// Snapshot and Reset are required.
type Case struct {
	// Handler is the handler under test, as it is registered behind the inbox middleware.
	// The kit runs it behind inbox.NewMiddleware itself, outside any router.
	Handler message.HandlerFunc

	// Store is the inbox store, on the real database the handler writes to. A database/sql
	// store (sqlinbox.NewDB) must run on a *sql.DB opened with OpenDB or on Connector, and so
	// must the handler's repositories: the kit counts and fails statements there. A pgx
	// store (sqlinbox.NewPgx) needs nothing more: the kit hands the handler a pgx.Tx of its
	// own that counts and fails statements.
	Store inbox.Store

	// Config is the middleware's configuration, as in production (WriteBehind, Key,
	// Publisher, ...). The kit gives every scenario a consumer of its own, derived from
	// Config.Consumer ("handlertest" if it is empty), so that the message is new to the
	// inbox in each; it clears ConsumerByHandler, which needs a router.
	Config inbox.Config

	// Message is the message every scenario delivers: each delivery is a copy with the same
	// UUID, payload and metadata, so the handler and the Probe see the same values every
	// time.
	Message *message.Message

	// Snapshot reads the business state the handler changes (rows of its tables, say) and
	// returns it as a value that reflect.DeepEqual compares: leave out what differs between
	// two runs of the same delivery (generated IDs, timestamps). It reads through the pool,
	// outside any inbox transaction. The kit reports a difference as paths, such as
	// "Invoices: 2 rows, want 1".
	Snapshot func(ctx context.Context) (any, error)

	// Reset restores the business state of before any delivery (DELETE FROM the handler's
	// tables, say); the kit calls it before every scenario and every injected failure, and
	// checks that Snapshot then reads what it read before the first delivery. It need not
	// touch the inbox table: each scenario claims under a consumer of its own.
	Reset func(ctx context.Context) error

	// Recorder, if set, is the publisher that the inbox.Publisher in Config.Publisher wraps
	// (inbox.NewPublisher(recorder)), so the kit sees what the handler publishes. Nil: the
	// kit checks only the messages the handler returns.
	Recorder *Recorder

	// Probe, if set, returns every idempotency key that the handler's fakes of systems
	// outside the database (a payment client, say) were called with, in order; "" for a call
	// without one. The external scenario checks that every attempt passed
	// inbox.KeyFromContext's key. Nil: that scenario is skipped.
	Probe func() []string

	// Retriable reports whether a nack is one that a redelivery fixes: a deadlock, a lock
	// timeout, a busy database. Default: DefaultRetriable.
	Retriable func(err error) bool

	// Copies is how many copies the sequential-copies scenario delivers after the first
	// delivery. Default: 3.
	Copies int

	// Concurrent is how many copies the concurrent scenario releases at once. Default: 4.
	Concurrent int

	// Deadline bounds each delivery, and the concurrent scenario as a whole: a delivery still
	// in flight then is reported as a hang, and the run stops. Default: 10 s.
	Deadline time.Duration

	// Seed orders the start of the concurrent copies, the one random choice the kit makes;
	// every report prints it. Default (0): a seed from the clock.
	Seed uint64
}

// Defaults of Case.
const (
	DefaultCopies     = 3
	DefaultConcurrent = 4
	DefaultDeadline   = 10 * time.Second
)

// setDefaults fills the fields whose zero value has a default.
func (c *Case) setDefaults() {
	if c.Retriable == nil {
		c.Retriable = DefaultRetriable
	}
	if c.Copies == 0 {
		c.Copies = DefaultCopies
	}
	if c.Concurrent == 0 {
		c.Concurrent = DefaultConcurrent
	}
	if c.Deadline == 0 {
		c.Deadline = DefaultDeadline
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
}

// validate returns every problem of c at once, so a team fixes its Case in one go.
func (c Case) validate() error {
	var problems []error
	if c.Handler == nil {
		problems = append(problems, errors.New("handlertest: Case.Handler is nil: give the handler under test"))
	}
	if c.Store == nil {
		problems = append(problems, errors.New("handlertest: Case.Store is nil: give the inbox store, on the real database"))
	}
	if c.Message == nil {
		problems = append(problems, errors.New("handlertest: Case.Message is nil: give the message to deliver"))
	} else if c.Config.Key == nil && c.Message.UUID == "" {
		problems = append(problems, errors.New("handlertest: Case.Message has no UUID, which is its idempotency key (Config.Key is not set)"))
	}
	if c.Snapshot == nil {
		problems = append(problems, errors.New("handlertest: Case.Snapshot is nil: give a function that reads the business state the handler changes"))
	}
	if c.Reset == nil {
		problems = append(problems, errors.New("handlertest: Case.Reset is nil: give a function that restores the business state of before any delivery"))
	}
	if c.Copies < 0 || c.Concurrent < 0 || c.Deadline < 0 {
		problems = append(problems, fmt.Errorf("handlertest: Case.Copies (%d), Case.Concurrent (%d) and Case.Deadline (%s) must not be negative",
			c.Copies, c.Concurrent, c.Deadline))
	}
	if c.Concurrent == 1 {
		problems = append(problems, errors.New("handlertest: Case.Concurrent is 1: concurrent copies need at least 2"))
	}
	return errors.Join(problems...)
}

// Package inboxtest is the conformance suite for [inbox.Store] implementations: every case
// runs the inbox middleware on a store against a real database and checks what the database
// holds afterwards (claims, business rows) and which deliveries were acked or nacked.
//
// The sqlinbox stores run it on PostgreSQL (pgx and database/sql), MariaDB and SQLite; a
// store or a sqlinbox.Dialect of your own runs it the same way, from a test of its own:
//
//	func TestConformance(t *testing.T) {
//		inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness { ... }, nil)
//	}
//
// The harness reaches the database for the suite ([Harness.Direct], [Harness.InTx]), so this
// package imports no database driver. [Options.Config] runs the suite with middleware options,
// write-behind mode ([inbox.Config.WriteBehind]) among them.
package inboxtest

import (
	"context"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Harness is one store under test and what the suite needs around it. Run's newHarness
// builds a fresh one for every case: an empty inbox table and an empty business table, dropped when
// the test ends (t.Cleanup).
type Harness struct {
	// Store is the store under test, on an inbox table named Table that exists.
	Store inbox.Store
	// Table is the inbox table, as the suite's own SQL writes it.
	Table string
	// Business is a table with the columns consumer and msg_key (text, at least
	// [inbox.MaxKeyLength] bytes) and no unique key, so that a message processed twice shows
	// up as two rows. The suite's handlers write one row per message into it.
	Business string

	// Direct reaches the database outside any inbox transaction (and around whatever Outage
	// cuts).
	Direct Runner
	// InTx reaches the database through the transaction in a handler's context
	// ([inbox.TxFromContext]); ok is false if there is none.
	InTx func(ctx context.Context) (r Runner, ok bool)
	// Placeholders rewrites a statement written with ? placeholders into the driver's style,
	// for statements the suite queues with [inbox.ExecAtCommit] ([DollarPlaceholders] for PostgreSQL).
	// Nil: ? is the driver's style.
	Placeholders func(query string) string

	// NewStore builds another store on the same database, on the inbox table table, or fails
	// for a name that could carry SQL (sqlinbox's constructors fail with an error wrapping
	// sqlinbox.ErrInvalidTableName). Nil: the suite does not check table names.
	NewStore func(table string) (inbox.Store, error)

	// CommitFaults each make the coming COMMIT of the inbox transaction fail when called
	// inside a handler (a deferred constraint that the handler violates, the connection
	// killed before COMMIT, ...). At least one is required, except in write-behind mode.
	CommitFaults map[string]func(ctx context.Context) error
	// QueuedCommitFaults each make COMMIT fail when deferred with [inbox.ExecAtCommit]
	// (written with ? placeholders): write-behind mode's handlers have no transaction to run
	// CommitFaults in. Nil: write-behind mode does not test failed commits.
	QueuedCommitFaults map[string]inbox.Statement

	// Outage makes the database unavailable to Store until restore is called. Nil: the
	// suite does not test an outage.
	Outage func() (restore func())

	// Retriable reports whether a delivery error is one a redelivery fixes when the database
	// resolves a race with an error (a deadlock, a lock timeout, a busy database). Nil: none
	// is; with no fault injected, any other failed delivery fails the suite.
	Retriable func(err error) bool
}

// Runner runs the suite's own SQL, written with ? placeholders; the Runner rewrites them
// for its driver.
type Runner interface {
	// Exec runs a statement.
	Exec(ctx context.Context, query string, args ...any) error
	// Count runs a query that returns one integer.
	Count(ctx context.Context, query string, args ...any) (int, error)
}

// Options are how the suite runs its handlers.
type Options struct {
	// Config is the middleware configuration of every handler the suite builds; the suite
	// sets Consumer itself and keeps the default Key (msg.UUID). With WriteBehind set, the
	// handlers write with [inbox.ExecAtCommit] instead of through the transaction, and the suite
	// checks what was committed rather than how often a handler ran (in write-behind mode a
	// handler also runs for a duplicate; only its effects are dropped).
	Config inbox.Config

	// ExecAtCommit makes the handlers write with [inbox.ExecAtCommit] in the claim-first mode
	// too (they still get the transaction, and read through it), so that the store's commit
	// carries the statements; the deferred commit faults then run in that mode as well.
	ExecAtCommit bool

	// Cases, if set, names the cases to run (as their subtests are named, with spaces);
	// nil runs them all.
	Cases []string
}

// Run runs every case on a fresh harness from newHarness, each as a subtest; nil options
// run them all in the claim-first mode with the default configuration.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness, opts *Options) {
	t.Helper()
	var options Options
	if opts != nil {
		options = *opts
	}
	selected := map[string]bool{}
	for _, name := range options.Cases {
		selected[name] = true
	}
	known := map[string]bool{}
	for _, c := range cases {
		known[c.name] = true
		if len(selected) > 0 && !selected[c.name] {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			c.run(t, &suite{Harness: h, options: options})
		})
	}
	for _, name := range options.Cases {
		if !known[name] {
			t.Errorf("inboxtest: no case named %q", name)
		}
	}
}

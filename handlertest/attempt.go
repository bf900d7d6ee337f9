package handlertest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrInjected is wrapped by the error of every statement and COMMIT handlertest fails on
// purpose, and is the value of the panic it injects: a handler sees it where the database's
// error would be.
var ErrInjected = errors.New("handlertest: injected failure")

// ErrUsedAfterReturn is wrapped by the error handlertest's transaction handles return to a call
// made after the handler returned (from a goroutine the handler started, say). The call is
// not sent to the database: in production it would either join the transaction by luck of
// timing or fail, and neither is what the handler meant.
var ErrUsedAfterReturn = errors.New("handlertest: the inbox transaction was used after the handler returned")

// failingSQL replaces a statement handlertest fails inside the store (a queued statement, the
// extra statement of a failed write-behind COMMIT): a syntax error on every database, so the
// real database refuses it and rolls the transaction back.
const failingSQL = "handlertest_injected_failure"

// phase is where an attempt is on the path of one delivery.
type phase int

const (
	phaseClaiming phase = iota // the store claims (claim-first); nothing of the handler yet
	phaseHandler               // the handler runs
	phaseReturned              // the handler returned; the middleware has not ended the transaction
	phaseEnding                // the store commits or rolls back (or, write-behind, claims and commits)
	phaseDone                  // the transaction is over
)

func (p phase) String() string {
	return [...]string{"claiming", "in the handler", "returned from the handler, before the commit",
		"committing or rolling back", "done"}[p]
}

// injectKind is what an attempt fails on purpose.
type injectKind int

const (
	injectNone      injectKind = iota
	injectStatement            // the handler's k-th statement through the transaction
	injectCommit               // COMMIT (or, write-behind, the claim-and-commit step)
	injectPanic                // a panic right after the handler returned
)

// injection is one failure point of the failures scenario.
type injection struct {
	kind injectKind
	k    int    // injectStatement: 1-based
	sql  string // injectStatement: the reference run's k-th statement, for the report
	of   int    // injectStatement: how many statements the reference ran
}

func (i injection) String() string {
	switch i.kind {
	case injectStatement:
		return fmt.Sprintf("statement %d of %d fails (%s)", i.k, i.of, i.sql)
	case injectCommit:
		return "COMMIT fails"
	case injectPanic:
		return "the handler returns, then a panic"
	}
	return "no failure injected"
}

// attemptCtxKey carries an attempt in the message context, and so in every context the
// middleware derives from it: the store's Claim, Commit and ClaimAndCommit, the handler's
// statements, the Publisher's publish.
type attemptCtxKey struct{}

func withAttempt(ctx context.Context, a *attempt) context.Context {
	return context.WithValue(ctx, attemptCtxKey{}, a)
}

func attemptFrom(ctx context.Context) (*attempt, bool) {
	if ctx == nil {
		return nil, false
	}
	a, ok := ctx.Value(attemptCtxKey{}).(*attempt)
	return a, ok
}

// attempt is one delivery of the message: what handlertest injects into it and what it saw.
// The package's store, transaction handles and driver connections update it as the delivery
// goes; a goroutine the handler left may too, hence the lock.
type attempt struct {
	label  string // "attempt 1", "copy 2", ...
	inject injection

	mu         sync.Mutex
	phase      phase
	ran        bool     // the handler ran
	duplicate  bool     // the store found the key committed
	key        string   // inbox.KeyFromContext in the handler
	statements []string // the handler's statements through the transaction, in order
	reached    bool     // the injection point was reached
	late       []string // uses of the transaction handle after the handler returned
	ended      string   // "Commit" or "Rollback": the handler ended the inbox transaction
	outside    []string // statements on other connections with the message's context
	txType     string   // the type of the store's transaction (Tx.Handle())
	pgx        bool     // the store's transaction is a pgx.Tx, which the kit wraps
	bound      bool     // a connection of Connector carries the inbox transaction
	record     []byte   // the record of produced messages the middleware gave the store

	// Set by the delivery once the middleware returned (or never, if it hung).
	err      error
	panicked any
	returned []*message.Message
	sent     []Produced // reached the Recorder during the attempt
}

func (a *attempt) setPhase(p phase) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.phase = p
}

func (a *attempt) currentPhase() phase {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.phase
}

// claiming marks the store's Claim: before the handler in claim-first mode, or after it in
// write-behind mode on a store that claims and commits in steps.
func (a *attempt) claiming() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase != phaseClaiming {
		a.phase = phaseEnding
	}
}

// verdict is what handlertest does with a call through the inbox transaction.
type verdict int

const (
	run    verdict = iota // send it
	inject                // fail it: the injection point
	late                  // refuse it: the handler returned
)

// handleUse decides a call through handlertest's own transaction handle (the pgx.Tx the handler
// gets), which only the handler uses: every use after it returned is late.
func (a *attempt) handleUse(what string) (verdict, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase == phaseHandler {
		return a.count(what)
	}
	a.late = append(a.late, what)
	return late, fmt.Errorf("%w: %s", ErrUsedAfterReturn, what)
}

// connUse decides a statement on the connection that carries the inbox transaction, which
// the store uses too: its own statements come while it claims and while it commits.
func (a *attempt) connUse(what string) (verdict, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.phase {
	case phaseHandler:
		return a.count(what)
	case phaseReturned:
		a.late = append(a.late, what)
		return late, fmt.Errorf("%w: %s", ErrUsedAfterReturn, what)
	}
	return run, nil
}

// queued decides a statement queued with inbox.ExecAtCommit: by the handler, or, in write-behind
// mode on a store that claims and commits in steps, by the middleware on its behalf.
func (a *attempt) queued(sql string) verdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase == phaseHandler || a.phase == phaseEnding {
		v, _ := a.count(sql)
		return v
	}
	return run
}

// count records the handler's next statement and fails it if it is the injection point.
// The caller holds a.mu.
func (a *attempt) count(what string) (verdict, error) {
	a.statements = append(a.statements, what)
	if a.inject.kind == injectStatement && a.inject.k == len(a.statements) {
		a.reached = true
		return inject, fmt.Errorf("%w: statement %d of the handler: %s", ErrInjected, a.inject.k, what)
	}
	return run, nil
}

// uncount takes back the statement count returned for, when the driver declined it
// (driver.ErrSkip) and database/sql sends it again another way.
func (a *attempt) uncount(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.statements) == n {
		a.statements = a.statements[:n-1]
	}
}

func (a *attempt) statementCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.statements)
}

// endedByHandler records that the handler committed or rolled back the inbox transaction.
func (a *attempt) endedByHandler(how string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.phase {
	case phaseHandler:
		a.ended = how
	case phaseReturned:
		a.late = append(a.late, how)
	}
}

// outsideStatement records a statement that carried the message's context on a connection
// other than the inbox transaction's, while the handler ran or after.
func (a *attempt) outsideStatement(what string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.phase {
	case phaseHandler:
		a.outside = append(a.outside, what)
	case phaseReturned, phaseDone:
		a.outside = append(a.outside, what+afterReturn)
	}
}

func (a *attempt) bind() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase == phaseClaiming {
		a.bound = true
	}
}

// view is a copy of what an attempt saw, for the checks to read without the lock.
type view struct {
	ran, duplicate, reached, bound bool
	pgx                            bool
	key, ended, txType             string
	statements, late, outside      []string
	phase                          phase
}

func (a *attempt) view() view {
	a.mu.Lock()
	defer a.mu.Unlock()
	return view{ran: a.ran, duplicate: a.duplicate, reached: a.reached, bound: a.bound, key: a.key,
		ended: a.ended, txType: a.txType, pgx: a.pgx, phase: a.phase,
		statements: append([]string(nil), a.statements...), late: append([]string(nil), a.late...),
		outside: append([]string(nil), a.outside...)}
}

// produced is what the attempt produced: the messages it returned (topic "", for the
// router to publish) and those that reached the [Recorder] while it ran.
func (a *attempt) produced() []Produced {
	out := make([]Produced, 0, len(a.returned)+len(a.sent))
	for _, m := range a.returned {
		out = append(out, produced("", m))
	}
	return append(out, a.sent...)
}

// recorded keeps the record of produced messages that the middleware gave the store.
func (a *attempt) recorded(record []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.record = record
}

// recordSent returns the record of produced messages that the middleware gave the store.
func (a *attempt) recordSent() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.record
}

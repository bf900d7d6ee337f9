package sqlinbox

import (
	"context"
	"database/sql"
	"errors"

	inbox "github.com/inboxkit/watermill-inbox"
)

// What differs between the stores is how a message's statements reach the database: a pgx
// batch, one database/sql statement at a time, or a multi-statement request. A pool says how;
// the claim flow (claim.go, writebehind.go) is the same for all of them.

// statement is one statement of a message's transaction.
type statement struct {
	sql  string
	args []any
	kind statementKind
	// found, if set, receives whether the statement returned a row (the claim that skips a
	// duplicate returns one only for a new claim); the row itself is not read.
	found *bool
}

// statementKind is what a statement is in the claim flow, for error messages, and for the
// handler kit, which follows a delivery's statements.
type statementKind int

const (
	kindLockTimeout statementKind = iota
	kindClaim
	kindQueued
	kindRecord
	kindTxMark  // marks the claim's transaction, after the claim (see commitGuard)
	kindTxCheck // checks, before COMMIT, that the transaction is still the claim's
)

// txCheckWhen is when a pool's claim-first sessions mark the claim's transaction and check it
// before COMMIT (see commitGuard).
type txCheckWhen int

const (
	// txCheckNever: the handler's statements go through the store (pgx's pgx.Tx), which
	// refuses what would end the transaction.
	txCheckNever txCheckWhen = iota
	// txCheckAlways: the mark and the check travel in requests the store sends anyway
	// (multi-statement requests), at no round trip.
	txCheckAlways
	// txCheckIfHandedOut: each costs a statement of its own (a round trip), so the mark is
	// sent when the handler first takes the transaction (inbox.TxFromContext) and the check
	// only then: a handler that only queues its writes has nothing the store did not read.
	txCheckIfHandedOut
)

// errTxCheckFailed is what a session reports, with the check's position, when the check before
// COMMIT (see commitGuard) returned no row: the transaction is not the claim's any more.
var errTxCheckFailed = errors.New("sqlinbox: the transaction is not the claim's any more")

// errClaimSkipped is what a session that sends a statement at a time reports, with the claim's
// position, when the claim skipped a duplicate and it sent nothing after it.
var errClaimSkipped = errors.New("sqlinbox: the claim found its key committed")

// The positions a session reports for the statement that failed, besides an index into the
// statements it was given.
const (
	failedBegin   = -1 // BEGIN, or whatever began the transaction
	failedUnknown = -2 // a request that cannot tell which of its statements failed
	failedSetup   = -3 // before any statement was sent; the error says what failed
)

// pool is what a store runs its statements on.
type pool interface {
	// session acquires what one message's transaction runs on.
	session(ctx context.Context) (session, error)
	// querier runs a statement on the pool, in a transaction of its own.
	querier
	// inTx runs f in a transaction on one connection. It commits if commit is set and f
	// returns nil, else rolls back; a transaction that cannot be rolled back closes its
	// connection. The transaction does not end when ctx does.
	inTx(ctx context.Context, commit bool, f func(q querier) error) error
	// hold runs f on one connection, outside a transaction, for a session lock; a connection
	// f reports broken is closed, not returned to the pool.
	hold(ctx context.Context, f func(q querier) (broken bool, err error)) error
	// maxConns is the most connections the pool opens; 0: no limit.
	maxConns() int
	// checksTx says when the pool's claim-first sessions mark the claim's transaction and
	// check it before COMMIT (see commitGuard): those whose handlers write through a
	// [*sql.Tx], whose statements the store does not see.
	checksTx() txCheckWhen
	// claimSkips reports whether the pool's sessions claim with the dialect's
	// InsertClaimOrSkip where it has one: sessions that send a statement at a time, in both
	// modes, and pgx's begin batch. A request that holds the statements after the claim
	// (write-behind mode's batch, a multi-statement request) claims with InsertClaim, whose
	// duplicate-key error stops it.
	claimSkips(writeBehind bool) bool
}

// querier runs the statements of the store's work besides claims: the table check, schema
// creation, retention.
type querier interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	queryInt(ctx context.Context, query string, args ...any) (sql.NullInt64, error)
	query(ctx context.Context, query string, args ...any) (rows, error)
}

// rows is what a querier's query returns: [*sql.Rows], or pgx.Rows with an adapted Close.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// session is one message's connection and transaction.
//
// A method that returns an error of a statement reports which failed: an index into the
// statements it was given, len(statements) for COMMIT, failedBegin or failedUnknown. After
// such an error the transaction may still be open: the flow then calls abort or
// rollbackAndSelect, and then release.
type session interface {
	// begin begins a transaction with first (the lock timeout and the claim), as one request
	// where the session can.
	begin(ctx context.Context, first []statement) (failed int, err error)
	// handle is what the handler writes through while the transaction is open: pgx.Tx,
	// [*sql.Tx], or the data layer's transaction ([Config.Begin]).
	handle() any
	// commit sends statements in the transaction begin began, then COMMIT, as one request
	// where the session can. A transaction the handler ended itself is an error wrapping
	// [inbox.ErrTxEndedByHandler].
	commit(ctx context.Context, statements []statement) (failed int, err error)
	// run sends BEGIN, statements and COMMIT, as one request where the session can.
	run(ctx context.Context, statements []statement) (failed int, err error)
	// rollback ends the transaction begin began, discarding it.
	rollback(ctx context.Context) error
	// rollbackAndSelect reads what the committed claim recorded (read: SelectClaim, or RelaySQL's with marks), after
	// a duplicate of the claim, and ends the transaction. Where the transaction is aborted
	// (PostgreSQL's after an error) the read runs after the ROLLBACK, outside it; a session
	// that sends a statement at a time reads in the transaction, which the claim that skipped
	// the duplicate (or InnoDB's and [SQLite]'s, after the duplicate-key error) left usable, so
	// that the read stays on one connection behind a transaction pooler.
	rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error)
	// abort ends the transaction a failed statement left open, if any, and returns the error
	// the flow reports for cause, which the session may explain further.
	abort(ctx context.Context, cause error) error
	// release gives the connection back; one left in a transaction is closed.
	release()
	// lost reports whether the session's connection broke (it closed; a ROLLBACK failed on
	// it), after a failure and the rollback or abort that followed it.
	lost() bool
	// raised reports whether err, which the handler returned, holds an error the database
	// raised on this session that transient (the dialect's IsTransient) reports: as the
	// session saw the handler's statements, or by transient alone where it sees none of them.
	raised(err error, transient func(error) bool) bool
}

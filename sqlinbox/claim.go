package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	inbox "github.com/inboxkit/watermill-inbox"
)

// The claim flow, the same on every store: check the table (and, for multi-statement
// requests, the server) once; begin with the lock timeout and the claim; a duplicate ends the
// transaction and reads the committed claim; a new claim hands the transaction to the
// handler, and its commit sends the queued statements, the record and COMMIT.

// The modes, as a refusal names them.
const (
	claimFirstMode  = "the claim-first mode"
	writeBehindMode = "write-behind mode"
)

// Claim implements [inbox.Store]. BEGIN, the lock timeout (if set) and the claim travel as one
// request where the store's driver can send one (pgx, multi-statement requests); a
// duplicate's ROLLBACK and the read of the committed claim share another.
func (s *Store) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	if err := s.before(ctx, claimFirstMode); err != nil {
		return nil, nil, err
	}
	sess, err := s.pool.session(ctx)
	if err != nil {
		return nil, nil, acquireError(err)
	}
	var inserted bool
	first := append(s.sql.lockTimeoutStatement(), s.sql.claimStatement(claim, s.pool.claimSkips(false), &inserted))
	claimAt := len(first) - 1
	if s.pool.checksTx() == txCheckAlways {
		first = append(first, s.sql.txMarkStatement()...)
	}
	failed, err := sess.begin(ctx, first)
	switch {
	case err == nil && (first[claimAt].found == nil || inserted):
		return &claimedTx{session: sess, store: s, claim: claim}, nil, nil
	case err != nil && !s.isDuplicate(err, failed, claimAt):
		err = sess.abort(ctx, s.explainClaim(ctx, sess, s.failure(first, failed, err, "claim")))
		sess.release()
		return nil, nil, &storeError{err}
	}
	prior, err := sess.rollbackAndSelect(ctx, s.claimRead(claim))
	sess.release()
	if err != nil {
		return nil, nil, &storeError{err}
	}
	return nil, s.priorRead(claim, prior), nil
}

// before returns nil once the store may claim: its table passed its check and, for a store
// that sends multi-statement requests, the server is not one that refuses them.
// Whatever stops it is the store's own failure: the check's connection refused, say.
func (s *Store) before(ctx context.Context, mode string) error {
	if err := s.shapeKnown(ctx); err != nil {
		return &storeError{err}
	}
	if s.refusal != nil {
		if err := s.refuse(ctx, mode); err != nil {
			return &storeError{err}
		}
	}
	return nil
}

// shapeKnown returns nil once the table has passed its check, whose verdict says whether the
// store keeps marks: retention must know before it deletes, or it could delete an unpublished
// record of a table it has not read.
func (s *Store) shapeKnown(ctx context.Context) error {
	return s.table.before(ctx, s.table.passing(s.describe))
}

// isDuplicate reports whether err, from the statement at failed, is a duplicate of the claim
// at claimAt: a violation of the inbox table's primary key by the claim, or by a statement of
// a request that cannot tell which of its statements failed (a committed claim then tells:
// see [MultiStatementSQL]).
func (s *Store) isDuplicate(err error, failed, claimAt int) bool {
	if errors.Is(err, errClaimSkipped) {
		return true
	}
	return (failed == claimAt || failed == failedUnknown) && s.sql.dialect.IsDuplicateKey(err, s.table.withKey(s.sql.table))
}

// failure describes the failure of the statement at failed among statements; request names
// a request that cannot tell which of its statements failed.
func (s *Store) failure(statements []statement, failed int, err error, request string) error {
	switch {
	case failed == failedSetup:
		return err
	case failed == failedBegin:
		return fmt.Errorf("sqlinbox: begin: %w", err)
	case failed == failedUnknown:
		return fmt.Errorf("sqlinbox: %s: %w", request, err)
	case failed >= len(statements):
		return fmt.Errorf("sqlinbox: commit: %w", err)
	}
	switch statements[failed].kind {
	case kindLockTimeout:
		return fmt.Errorf("sqlinbox: set lock timeout: %w", err)
	case kindClaim:
		return fmt.Errorf("sqlinbox: claim: %w", err)
	case kindRecord:
		return fmt.Errorf("sqlinbox: record produced messages: %w", err)
	case kindTxMark:
		return fmt.Errorf("sqlinbox: mark the claim's transaction: %w", err)
	case kindTxCheck:
		return fmt.Errorf("sqlinbox: check the transaction before COMMIT: %w", err)
	}
	queued := 0
	for _, st := range statements[:failed+1] {
		if st.kind == kindQueued {
			queued++
		}
	}
	return fmt.Errorf("sqlinbox: queued statement %d: %w", queued, err)
}

// txCheckFailed reports whether err, from the statement at failed, is the check before COMMIT
// finding the transaction ended (see commitGuard).
func (s *Store) txCheckFailed(statements []statement, failed int, err error) bool {
	if errors.Is(err, errTxCheckFailed) {
		return true
	}
	guard, ok := s.sql.dialect.(commitGuard)
	if !ok || !guard.checkFailed(err) {
		return false
	}
	return failed == failedUnknown || failed >= 0 && failed < len(statements) && statements[failed].kind == kindTxCheck
}

// claimedTx is the transaction of one claimed message, on a session the store holds until
// Commit or Rollback.
type claimedTx struct {
	session session
	store   *Store
	claim   inbox.Claim
	lost    bool // the session's connection broke, as Rollback found it
	// handedOut: Handle was called, and marked the transaction (txCheckIfHandedOut), with
	// markErr if the mark failed.
	marked    sync.Once
	handedOut bool
	markErr   error
	statementQueue
}

var _ inbox.Tx = (*claimedTx)(nil)

// Handle returns the session's handle. On a store whose handlers' statements the store does
// not see, the first call marks the transaction for the check before COMMIT (see
// commitGuard).
func (t *claimedTx) Handle() any {
	if t.store.pool.checksTx() == txCheckIfHandedOut {
		t.marked.Do(func() {
			t.handedOut = true
			if m, ok := t.session.(interface{ mark([]statement) error }); ok {
				t.markErr = m.mark(t.store.sql.txMarkStatement())
			}
		})
	}
	return t.session.handle()
}

// Commit sends the queued statements, the record of produced messages and COMMIT, as one
// request where the store's driver can send one: one round trip whatever the handler queued.
// It always releases the connection.
func (t *claimedTx) Commit(ctx context.Context, produced []byte) error {
	defer t.session.release()
	statements := t.take()
	if err := t.store.sql.checkQueued(statements); err != nil {
		return t.session.abort(ctx, err)
	}
	if produced != nil {
		statements = append(statements, t.store.sql.recordStatement(t.claim, produced, t.store.marks()))
	}
	var claims bool
	t.marked.Do(func() {}) // the mark, if Handle sent it, happened before
	if t.markErr != nil {
		return t.session.abort(ctx, &storeError{fmt.Errorf("sqlinbox: mark the claim's transaction: %w", t.markErr)})
	}
	if when := t.store.pool.checksTx(); when == txCheckAlways || when == txCheckIfHandedOut && t.handedOut {
		statements = append(statements, t.store.sql.txCheckStatement(t.claim, &claims)...)
	}
	failed, err := t.session.commit(ctx, statements)
	if err == nil {
		return nil
	}
	if errors.Is(err, inbox.ErrTxEndedByHandler) {
		return t.session.abort(ctx, err) // a transaction still open (a refused statement's) rolls back
	}
	if t.store.txCheckFailed(statements, failed, err) {
		return t.session.abort(ctx, fmt.Errorf("sqlinbox: commit: the transaction is not the claim's any more: the handler "+
			"ended it (a ROLLBACK, COMMIT, START TRANSACTION or, on MySQL, an implicit commit it sent on the transaction), "+
			"and what it sent after that ran outside it; nothing more was committed: %w (%w)", inbox.ErrTxEndedByHandler, err))
	}
	committing := failed == len(statements) && connectionLost(err)
	err = t.session.abort(ctx, t.store.failure(statements, failed, err, "commit request"))
	err = t.store.explainSize(ctx, statements, err)
	if committing || t.session.lost() {
		return &storeError{err} // the session broke: the COMMIT's outcome is for the next delivery to find out
	}
	return err
}

// Rollback ends the transaction and releases the connection. A rollback that fails, on a
// transaction the handler did not end, is the session's connection lost: a store error.
func (t *claimedTx) Rollback(ctx context.Context) error {
	defer t.session.release()
	err := t.session.rollback(ctx)
	t.marked.Do(func() {})
	if t.markErr != nil {
		// The mark rolled the transaction back already: its failure is what ended it, and
		// what the handler's statements after it met (sql.ErrTxDone).
		return &storeError{fmt.Errorf("sqlinbox: mark the claim's transaction when the handler took it: %w", t.markErr)}
	}
	t.lost = t.session.lost()
	if err != nil && t.lost {
		return &storeError{err}
	}
	return err
}

// IsTransient reports whether err, which the handler returned before Rollback, is a failure
// of the inbox's own database on this transaction, for the middleware (see [Store.IsTransient]):
// the session's connection lost, or an error the database raised on the session that the
// dialect reports.
func (t *claimedTx) IsTransient(err error) bool {
	if err == nil || errors.Is(err, inbox.ErrRecordTooLarge) {
		return false
	}
	t.marked.Do(func() {})
	// A mark that failed is the store's own statement failing, and ended the transaction.
	return t.lost || t.markErr != nil || t.session.raised(err, t.store.sql.dialect.IsTransient)
}

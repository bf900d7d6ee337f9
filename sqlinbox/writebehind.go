package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// ClaimAndCommit implements [inbox.WriteBehindStore]: BEGIN, the lock timeout (if set), the
// claim as a plain INSERT, the statements, the record of produced messages and COMMIT, as one
// request where the store's driver can send one (pgx, multi-statement requests): one round
// trip. A duplicate makes the claim fail on the primary key, which ends the request; ROLLBACK
// and the read of the committed claim then share another. A store made by [NewDB] sends the
// same statements one at a time.
func (s *Store) ClaimAndCommit(ctx context.Context, claim inbox.Claim, queued []inbox.Statement, produced []byte) (*inbox.Record, error) {
	if err := s.before(ctx, writeBehindMode); err != nil {
		return nil, err
	}
	handlers := queuedStatements(queued)
	if err := s.sql.checkQueued(handlers); err != nil {
		return nil, err
	}
	sess, err := s.pool.session(ctx)
	if err != nil {
		return nil, acquireError(err)
	}
	defer sess.release()
	var inserted bool
	marks, skip := s.marks(), s.pool.claimSkips(true)
	claimSt, recorded := s.sql.recordedClaimStatement(claim, produced, marks, skip, &inserted)
	if !recorded {
		claimSt = s.sql.claimStatement(claim, skip, &inserted)
	}
	statements := append(s.sql.lockTimeoutStatement(), claimSt)
	claimAt := len(statements) - 1
	statements = append(statements, handlers...)
	if produced != nil && !recorded {
		statements = append(statements, s.sql.recordStatement(claim, produced, marks))
	}
	failed, err := sess.run(ctx, statements)
	switch {
	case err == nil:
		return nil, nil
	case s.isDuplicate(err, failed, claimAt):
		prior, readErr := sess.rollbackAndSelect(ctx, s.claimRead(claim))
		switch {
		case readErr != nil && errors.Is(err, errClaimSkipped):
			return nil, &storeError{readErr}
		case readErr != nil:
			// A request that cannot tell its failed statement: a queued statement's violation
			// of another table's primary key, with no committed claim to make it a duplicate.
			return nil, errors.Join(s.failure(statements, failed, err, "write-behind request"), readErr)
		}
		return s.priorRead(claim, prior), nil
	case failed == len(statements):
		// The outcome of a failed COMMIT is for the next delivery to find out.
		err = fmt.Errorf("sqlinbox: commit: %w", err)
		if connectionLost(err) || sess.lost() {
			return nil, &storeError{err}
		}
		return nil, err
	}
	err = s.failure(statements, failed, err, "write-behind request")
	refused := false
	if failed == failedUnknown || failed <= claimAt {
		explained := s.explainClaim(ctx, sess, err)
		refused, err = explained != err, explained
	}
	err = sess.abort(ctx, err)
	if refused || failed != failedUnknown && (failed < claimAt+1) {
		return nil, &storeError{err} // BEGIN, the lock timeout or the claim, or the claim's refusal of the connection
	}
	if err = s.explainSize(ctx, statements, err); sess.lost() {
		return nil, &storeError{err} // the session broke: whatever the statement was, the message is not at fault
	}
	return nil, err
}

// queuedStatements are the statements a handler queued, as the store sends them.
func queuedStatements(queued []inbox.Statement) []statement {
	statements := make([]statement, len(queued))
	for i, st := range queued {
		statements[i] = statement{sql: st.SQL, args: st.Args, kind: kindQueued}
	}
	return statements
}

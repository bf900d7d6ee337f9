package sqlinbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
)

// ClaimAndCommit implements inbox.WriteBehindStore in one round trip: BEGIN, the lock
// timeout (if set), the claim as a plain INSERT, the statements, the record of produced
// messages and COMMIT in one batch. A duplicate makes the claim fail on the primary key, which aborts the
// transaction and skips the rest of the batch; ROLLBACK and the read of the committed claim
// then share a second batch.
func (s *PgxStore) ClaimAndCommit(ctx context.Context, claim inbox.Claim, statements []inbox.Statement, produced []byte) (*inbox.Processed, error) {
	if err := s.guardTable(ctx); err != nil {
		return nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: acquire a connection: %w", err)
	}
	defer conn.Release() // a connection left in a transaction is closed, not reused
	c := conn.Conn()
	queued := make([]queuedStatement, len(statements))
	for i, st := range statements {
		queued[i] = queuedStatement{st.SQL, st.Args}
	}
	// ROLLBACK and the read of the record too: after a duplicate the transaction is
	// aborted, and the server refuses to prepare anything until it ends.
	own := []string{sqlBegin, s.sql.insert, s.sql.record, sqlCommit, sqlRollback, s.sql.prior}
	if err := s.prepareNamed(ctx, c, own, queued); err != nil {
		return nil, err
	}

	batch := &pgx.Batch{}
	batch.Queue(sqlBegin)
	s.queueLockTimeout(batch)
	claimAt := batch.Len()
	batch.Queue(s.sql.insert, claim.Consumer, claim.Key, claim.Fingerprint)
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	if produced != nil {
		batch.Queue(s.sql.record, produced, claim.Consumer, claim.Key)
	}
	batch.Queue(sqlCommit)
	failedAt, err := sendBatch(ctx, c, batch)
	switch {
	case err == nil:
		return nil, nil
	case failedAt == claimAt && s.guard.isDuplicateKey(s.sql, err):
		return s.readAfterDuplicate(ctx, c, claim)
	case failedAt == batch.Len()-1:
		return nil, fmt.Errorf("sqlinbox: commit: %w", err)
	case failedAt == claimAt:
		return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: claim: %w", err))
	case failedAt > claimAt+len(queued):
		return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: record produced messages: %w", err))
	}
	return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: queued statement %d: %w", failedAt-claimAt, err))
}

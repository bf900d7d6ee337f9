package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// whatIfStore is NOT the library: it is sqlinbox.PgxStore's claim and write-behind commit
// (sqlinbox/pgx.go) re-typed with one change, to measure what that change would be worth:
// the COMMIT queued in the commit batch is spelled "COMMIT" instead of "commit".
//
// Why it matters: after the batch has committed, sqlinbox's closeCommitted calls
// tx.Commit with a cancelled context to mark the pgx.Tx ended. pgx's Conn.exec fails on the
// cancelled context and then invalidates the statement cache entry of its SQL, "commit",
// which is the very entry the batch's "commit" was cached under. So every write-behind
// commit on a connection re-prepares "commit" (one more round trip inside SendBatch), and
// the next statement on that connection first sends a DEALLOCATE (one more round trip).
// With a different spelling, the invalidation misses the batch's entry.
type whatIfStore struct {
	pool                *pgxpool.Pool
	claimSQL, priorSQL  string
	batchCommitSpelling string
}

func newWhatIfStore(pool *pgxpool.Pool, table, spelling string) *whatIfStore {
	return &whatIfStore{
		pool:                pool,
		claimSQL:            fmt.Sprintf(`INSERT INTO %s (consumer, message_id, payload_hash) VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING`, table),
		priorSQL:            fmt.Sprintf(`SELECT payload_hash, produced FROM %s WHERE consumer = $1 AND message_id = $2`, table),
		batchCommitSpelling: spelling,
	}
}

func (s *whatIfStore) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(s.claimSQL, claim.Consumer, claim.Key, claim.Fingerprint)
	batch.Queue(s.priorSQL, claim.Consumer, claim.Key)
	results := s.pool.SendBatch(ctx, batch)
	tx := results.Tx()
	var prior inbox.Processed
	_, err := results.Exec()
	var inserted bool
	if err == nil {
		var tag interface{ RowsAffected() int64 }
		tag, err = results.Exec()
		if err == nil {
			inserted = tag.RowsAffected() == 1
			err = results.QueryRow().Scan(&prior.Fingerprint, &prior.Produced)
		}
	}
	err = errors.Join(err, results.Close())
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	if inserted {
		return &whatIfTx{tx: tx, spelling: s.batchCommitSpelling}, nil, nil
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, nil, err
	}
	return nil, &prior, nil
}

type whatIfTx struct {
	tx       pgx.Tx
	spelling string
	mu       sync.Mutex
	batch    pgx.Batch
}

func (t *whatIfTx) Driver() any { return t.tx }

func (t *whatIfTx) Queue(sql string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batch.Queue(sql, args...)
}

func (t *whatIfTx) Commit(ctx context.Context, produced []byte) error {
	if produced != nil {
		return errors.New("what-if store: produced messages not supported")
	}
	t.mu.Lock()
	batch := &t.batch
	t.mu.Unlock()
	if batch.Len() == 0 {
		return t.tx.Commit(ctx)
	}
	batch.Queue(t.spelling)
	results := t.tx.SendBatch(ctx, batch)
	var err error
	for range batch.Len() {
		if _, err = results.Exec(); err != nil {
			break
		}
	}
	if err = errors.Join(err, results.Close()); err != nil {
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	done, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	_ = t.tx.Commit(done) // as sqlinbox's closeCommitted does
	return nil
}

func (t *whatIfTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// PgxBeginner is what NewPgx needs from a database handle: a *pgxpool.Pool, a *pgx.Conn,
// or anything that begins a pgx transaction.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// pgxBatchSender is how the pool and the connection send BEGIN and the claim together.
type pgxBatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// PgxStore is an inbox.Store on PostgreSQL through pgx v5. Handlers get a pgx.Tx from
// inbox.TxFromContext[pgx.Tx].
//
// With a *pgxpool.Pool or a *pgx.Conn, BEGIN and the claim travel in one pipelined batch, so
// the claim costs no round trip of its own, and the statements a handler queued with
// inbox.Queue, the record of produced messages and COMMIT travel in another: a first
// delivery costs the round trips of the handler's own transaction, a duplicate two. Keep
// pgx's default statement cache (QueryExecModeCacheStatement): the other modes were 25-35%
// slower for the claim.
type PgxStore struct {
	db       PgxBeginner
	pipeline pgxBatchSender // nil: begin, then claim
	sql      statements
}

var _ inbox.Store = (*PgxStore)(nil)

// NewPgx returns a store that claims messages in table config.Table through db. A
// *pgx.Conn serves one message at a time; give a router with concurrent handlers a pool.
func NewPgx(db PgxBeginner, config Config) (*PgxStore, error) {
	if db == nil {
		return nil, errors.New("sqlinbox: NewPgx: db is nil")
	}
	sql, err := newStatements(Postgres, config)
	if err != nil {
		return nil, err
	}
	s := &PgxStore{db: db, sql: sql}
	// Only a pool or a connection: a batch sent on a pgx.Tx would run inside that
	// transaction, where BEGIN starts nothing.
	switch db := db.(type) {
	case *pgxpool.Pool:
		s.pipeline = db
	case *pgx.Conn:
		s.pipeline = db
	}
	return s, nil
}

// InitializeSchema creates the inbox table if it does not exist. It is safe to call on every
// start, from every instance at once.
func (s *PgxStore) InitializeSchema(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.schemaLock); err != nil {
			return fmt.Errorf("sqlinbox: lock for schema: %w", err)
		}
		for _, statement := range s.sql.schema {
			if _, err := tx.Exec(ctx, statement); err != nil {
				return fmt.Errorf("sqlinbox: create inbox table: %w", err)
			}
		}
		return nil
	})
}

// Claim implements inbox.Store.
func (s *PgxStore) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	tx, inserted, prior, err := s.beginAndClaim(ctx, claim)
	if err != nil {
		return nil, nil, err
	}
	if inserted {
		return &pgxTx{tx: tx, store: s, claim: claim}, nil, nil
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: end transaction of a duplicate: %w", err)
	}
	return nil, prior, nil
}

// beginAndClaim returns an open transaction and whether the claim inserted its row, or else
// what the committed row recorded; on an error the transaction is already ended.
func (s *PgxStore) beginAndClaim(ctx context.Context, claim inbox.Claim) (tx pgx.Tx, inserted bool, prior *inbox.Processed, err error) {
	// The lock timeout and the claim, which reads a committed claim in the same statement,
	// travel in one batch; with a pool or a connection, BEGIN travels in it too.
	batch := &pgx.Batch{}
	var results pgx.BatchResults
	if s.pipeline != nil {
		batch.BeginTx(pgx.TxOptions{})
		s.queueClaim(batch, claim)
		results = s.pipeline.SendBatch(ctx, batch)
		tx = results.Tx()
	} else {
		if tx, err = s.db.Begin(ctx); err != nil {
			return nil, false, nil, fmt.Errorf("sqlinbox: begin: %w", err)
		}
		s.queueClaim(batch, claim)
		results = tx.SendBatch(ctx, batch)
	}
	inserted, prior, err = readClaimBatch(results, s.pipeline != nil, s.sql.lockTimeout != "")
	if closeErr := results.Close(); err == nil && closeErr != nil {
		err = fmt.Errorf("sqlinbox: claim: %w", closeErr)
	}
	if err == nil && !inserted && prior == nil {
		// Committed while the claim waited for it: invisible to the claim's snapshot.
		prior, err = scanPrior(tx.QueryRow(ctx, s.sql.prior, claim.Consumer, claim.Key))
	}
	if err != nil {
		return nil, false, nil, endAfter(ctx, tx, err)
	}
	return tx, inserted, prior, nil
}

func (s *PgxStore) queueClaim(batch *pgx.Batch, claim inbox.Claim) {
	if s.sql.lockTimeout != "" {
		batch.Queue(s.sql.lockTimeout, s.sql.lockTimeoutArgs...)
	}
	batch.Queue(s.sql.claimOrRead, claim.Consumer, claim.Key, claim.Fingerprint)
}

// readClaimBatch reads the results of BEGIN (if the batch has it), the lock timeout (if set)
// and the claim. A claim that inserted nothing and read nothing returns neither inserted nor
// prior.
func readClaimBatch(results pgx.BatchResults, withBegin, withLockTimeout bool) (inserted bool, prior *inbox.Processed, err error) {
	if withBegin {
		if _, err := results.Exec(); err != nil {
			return false, nil, fmt.Errorf("sqlinbox: begin: %w", err)
		}
	}
	if withLockTimeout {
		if _, err := results.Exec(); err != nil {
			return false, nil, fmt.Errorf("sqlinbox: set lock timeout: %w", err)
		}
	}
	var read inbox.Processed
	err = results.QueryRow().Scan(&inserted, &read.Fingerprint, &read.Produced)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil, nil
	case err != nil:
		return false, nil, fmt.Errorf("sqlinbox: claim: %w", err)
	case inserted:
		return true, nil, nil
	}
	return false, &read, nil
}

// scanPrior reads the committed claim's record. No row means it was deleted between the
// claim and the read (retention): an error, so the message is redelivered and claimed anew.
func scanPrior(row interface{ Scan(...any) error }) (*inbox.Processed, error) {
	var prior inbox.Processed
	if err := row.Scan(&prior.Fingerprint, &prior.Produced); err != nil {
		return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", err)
	}
	return &prior, nil
}

// endAfter rolls tx back after err, which is returned with any rollback failure. A pool's
// transaction must be ended even when BEGIN failed, to give its connection back.
func endAfter(ctx context.Context, tx pgx.Tx, err error) error {
	if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
		return errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
	}
	return err
}

// pgxTx adapts a pgx.Tx to inbox.Tx.
type pgxTx struct {
	tx    pgx.Tx
	store *PgxStore
	claim inbox.Claim
	statementQueue
}

var _ inbox.StatementQueuer = (*pgxTx)(nil)

func (t *pgxTx) Driver() any { return t.tx }

// Commit sends the queued statements, the record of produced messages and COMMIT in one
// pipelined batch: one round trip, whatever the handler queued.
func (t *pgxTx) Commit(ctx context.Context, produced []byte) error {
	queued := t.take()
	if len(queued) == 0 && produced == nil {
		return pgxEnded(t.tx.Commit(ctx))
	}
	batch := &pgx.Batch{}
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	if produced != nil {
		batch.Queue(t.store.sql.record, produced, t.claim.Consumer, t.claim.Key)
	}
	batch.Queue(commitInBatch)
	if err := sendCommitBatch(ctx, t.tx, batch); err != nil {
		return endAfter(ctx, t.tx, pgxEnded(err))
	}
	closeCommitted(ctx, t.tx)
	return nil
}

func sendCommitBatch(ctx context.Context, tx pgx.Tx, batch *pgx.Batch) error {
	results := tx.SendBatch(ctx, batch)
	var tag pgconn.CommandTag
	var err error
	for range batch.Len() {
		if tag, err = results.Exec(); err != nil {
			break
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("sqlinbox: commit batch: %w", err)
	}
	if tag.String() == "ROLLBACK" { // the server rolled back instead, as pgx's Commit reports
		return fmt.Errorf("sqlinbox: commit batch: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

// commitInBatch is the COMMIT sent in a batch, where pgx prepares and caches it. Its text
// must differ from the "commit" that closeCommitted makes pgx's Commit fail with: pgx drops
// the cached statement of a failed query's text, and re-preparing it would cost two round
// trips a message.
const commitInBatch = "COMMIT"

// closeCommitted marks tx ended after a COMMIT sent in a batch, without another round trip.
// pgx offers no other way: Commit with a context that is already done sends nothing (pgconn
// checks the context before writing), and since the connection is idle it is neither
// closed nor broken; a pool's transaction gives its connection back. A query tracer sees
// this "commit" fail with context.Canceled.
func closeCommitted(ctx context.Context, tx pgx.Tx) {
	done, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	_ = tx.Commit(done)
}

func (t *pgxTx) Rollback(ctx context.Context) error { return pgxEnded(t.tx.Rollback(ctx)) }

// pgxEnded marks the error of a transaction the handler already committed or rolled back.
func pgxEnded(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

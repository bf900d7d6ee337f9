package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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
// the claim costs no round trip of its own. Keep pgx's default statement cache
// (QueryExecModeCacheStatement): the other modes were 25-35% slower for the claim.
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
		if _, err := tx.Exec(ctx, s.sql.schema); err != nil {
			return fmt.Errorf("sqlinbox: create inbox table: %w", err)
		}
		return nil
	})
}

// Claim implements inbox.Store.
func (s *PgxStore) Claim(ctx context.Context, consumer, key string) (inbox.Tx, bool, error) {
	tx, inserted, err := s.beginAndClaim(ctx, consumer, key)
	if err != nil {
		return nil, false, err
	}
	if inserted == 0 {
		if err := tx.Rollback(ctx); err != nil {
			return nil, false, fmt.Errorf("sqlinbox: end transaction of a duplicate: %w", err)
		}
		return nil, false, nil
	}
	return pgxTx{tx}, true, nil
}

// beginAndClaim returns an open transaction and how many rows the claim inserted, or an
// error with the transaction already ended.
func (s *PgxStore) beginAndClaim(ctx context.Context, consumer, key string) (pgx.Tx, int64, error) {
	if s.pipeline == nil {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("sqlinbox: begin: %w", err)
		}
		tag, err := tx.Exec(ctx, s.sql.claim, consumer, key)
		if err != nil {
			return nil, 0, endAfter(ctx, tx, fmt.Errorf("sqlinbox: claim: %w", err))
		}
		return tx, tag.RowsAffected(), nil
	}

	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	batch.Queue(s.sql.claim, consumer, key)
	results := s.pipeline.SendBatch(ctx, batch)
	tx := results.Tx()
	if _, err := results.Exec(); err != nil {
		results.Close()
		return nil, 0, endAfter(ctx, tx, fmt.Errorf("sqlinbox: begin: %w", err))
	}
	tag, err := results.Exec()
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, 0, endAfter(ctx, tx, fmt.Errorf("sqlinbox: claim: %w", err))
	}
	return tx, tag.RowsAffected(), nil
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
type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Driver() any                        { return t.tx }
func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
)

// Cleanup implements Cleaner. Its lock is a PostgreSQL transaction-level advisory lock,
// keyed by the table's OID, in a transaction that it keeps open on one pool connection for
// the whole pass; the batches run on the pool's other connections, so a pass uses two at a
// time: a pool of one connection is refused. The lock ends with its transaction: at the end
// of the pass, and also when the cleaner is killed or its connection lost, and a pooler in
// transaction mode keeps that transaction on one server connection.
func (s *PgxStore) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	return s.cleanup(ctx, olderThan, config, nil)
}

func (s *PgxStore) cleanup(ctx context.Context, olderThan time.Duration, cleanupConfig CleanupConfig, rowsCleaned metric.Int64Counter) (int64, error) {
	config, err := preparePass(olderThan, cleanupConfig, rowsCleaned)
	if err != nil {
		return 0, err
	}
	// The PostgreSQL dialect always has a transaction lock (CleanupTxLock), and NewPgx takes
	// no other dialect.
	cleanup := s.sql.cleanup
	if s.pool.Config().MaxConns < 2 {
		return 0, errors.New("sqlinbox: cleanup: the pool has one connection: a pass holds its lock on one and deletes on another")
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: acquire a connection: %w", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return 0, fmt.Errorf("sqlinbox: cleanup: begin the lock's transaction: %w", err)
	}
	lock := cleanup.txLockIn(pgxSession{tx.Conn()}, tx.Rollback)
	deleted, broken, err := cleanup.pass(ctx, pgxPoolSession{s.pool}, lock, olderThan, config)
	if broken {
		// Closing the connection ends the transaction and with it the lock.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	} else {
		conn.Release()
	}
	return deleted, err
}

// CountExpired returns the number of claims older than olderThan: what Cleanup would delete
// now.
func (s *PgxStore) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	return s.sql.cleanup.countExpired(ctx, pgxPoolSession{s.pool}, olderThan)
}

type pgxSession struct{ conn *pgx.Conn }

func (s pgxSession) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.conn.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (s pgxSession) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = s.conn.QueryRow(ctx, query, args...).Scan(&v)
	return v, err
}

// pgxPoolSession runs each statement on a connection of the pool, in a transaction of its
// own.
type pgxPoolSession struct{ pool *pgxpool.Pool }

func (s pgxPoolSession) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (s pgxPoolSession) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = s.pool.QueryRow(ctx, query, args...).Scan(&v)
	return v, err
}

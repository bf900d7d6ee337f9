package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Cleanup implements Cleaner. On PostgreSQL its lock is a transaction-level advisory lock
// keyed by the table's OID, in a transaction kept open on one connection for the pass while
// the batches run on the pool's other connections (a pool limited to one open connection is
// refused); it ends with its transaction, also when the cleaner is killed, its connection
// lost, or a pooler in transaction mode sits between. On MySQL/MariaDB it is a named lock
// (GET_LOCK) for the database and table, a session lock taken, used and released on the one
// connection the pass runs on. SQLite takes no lock: its single writer runs one batch at a
// time.
func (s *SQLStore) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	return s.cleanup(ctx, olderThan, config, nil)
}

func (s *SQLStore) cleanup(ctx context.Context, olderThan time.Duration, cleanupConfig CleanupConfig, rowsCleaned metric.Int64Counter) (int64, error) {
	config, err := preparePass(olderThan, cleanupConfig, rowsCleaned)
	if err != nil {
		return 0, err
	}
	cleanup := s.sql.cleanup
	if cleanup.txLock != "" {
		return s.cleanupInTxLock(ctx, olderThan, config)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: get a connection: %w", err)
	}
	session := sqlSession{conn}
	var lock *cleanupLock
	if cleanup.lock != "" {
		lock = cleanup.sessionLock(session)
	}
	deleted, broken, err := cleanup.pass(ctx, session, lock, olderThan, config)
	if broken {
		// driver.ErrBadConn makes database/sql close the connection, which ends the
		// session and with it the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
	return deleted, err
}

// cleanupInTxLock runs a pass holding the dialect's transaction lock in a transaction of its
// own, the batches on the pool's other connections.
func (s *SQLStore) cleanupInTxLock(ctx context.Context, olderThan time.Duration, config passConfig) (int64, error) {
	if s.db.Stats().MaxOpenConnections == 1 {
		return 0, errors.New("sqlinbox: cleanup: the pool has one connection: a pass holds its lock on one and deletes on another")
	}
	// The transaction is begun without ctx, so that cancelling ctx does not end it before
	// the pass: the pass stops at its next statement and rolls it back.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: get a connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: begin the lock's transaction: %w", err)
	}
	lock := s.sql.cleanup.txLockIn(sqlTxSession{tx}, func(context.Context) error { return tx.Rollback() })
	deleted, broken, err := s.sql.cleanup.pass(ctx, sqlDBSession{s.db}, lock, olderThan, config)
	if broken {
		// database/sql closes the connection, and with it the transaction and its lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return deleted, err
}

// CountExpired returns the number of claims older than olderThan: what Cleanup would delete
// now.
func (s *SQLStore) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	return s.sql.cleanup.countExpired(ctx, sqlDBSession{s.db}, olderThan)
}

type sqlSession struct{ conn *sql.Conn }

func (s sqlSession) exec(ctx context.Context, query string, args ...any) (int64, error) {
	result, err := s.conn.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected()
}

func (s sqlSession) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = s.conn.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

// sqlDBSession runs each statement on a connection of the pool, in a transaction of its own.
type sqlDBSession struct{ db *sql.DB }

func (s sqlDBSession) exec(ctx context.Context, query string, args ...any) (int64, error) {
	result, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected()
}

func (s sqlDBSession) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = s.db.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

// sqlTxSession runs statements in tx.
type sqlTxSession struct{ tx *sql.Tx }

func (s sqlTxSession) exec(ctx context.Context, query string, args ...any) (int64, error) {
	result, err := s.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected()
}

func (s sqlTxSession) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = s.tx.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

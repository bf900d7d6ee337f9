package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Retention: the inbox keeps a row per processed message, and a row is only useful while a
// copy of its message can still arrive. Cleanup deletes the rows older than a retention, of
// every consumer (also of consumers that no longer exist), in bounded batches.

// DefaultCleanupBatchSize is the number of rows one cleanup statement deletes when
// CleanupConfig.BatchSize is 0.
const DefaultCleanupBatchSize = 10_000

// ErrCleanupBusy is returned by PgxStore.Cleanup and SQLStore.Cleanup, having deleted
// nothing, when another cleanup of the same table holds its lock (PostgreSQL: an advisory
// lock; MySQL: a named lock, GET_LOCK). SQLite takes no lock and never returns it.
var ErrCleanupBusy = errors.New("sqlinbox: another cleanup of this table is running")

// CleanupConfig configures one cleanup pass. The zero value is ready to use.
type CleanupConfig struct {
	// BatchSize is the most rows one DELETE removes; each batch is a transaction of its own,
	// so locks are held briefly and an interrupted pass keeps what it deleted.
	// Default: DefaultCleanupBatchSize (10,000).
	BatchSize int

	// Pause is how long to wait between batches, leaving the database to the claims.
	// Default 0: no pause.
	Pause time.Duration

	// Progress, if set, is called on the cleanup's goroutine: once when the pass has its lock
	// (Batches 0), then after each batch; the last call has Done set. The lock is held
	// during every call, so a slow Progress delays other cleanups, not claims.
	Progress func(CleanupProgress)

	// MeterProvider receives the inbox.cleanup.rows_deleted counter (inbox.MetricRowsCleaned),
	// with the attribute "table". Default: the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// rowsCleaned, if set, is the counter on MeterProvider, created once by a
	// RetentionRunner for all its passes.
	rowsCleaned metric.Int64Counter
}

// newRowsCleaned creates the inbox.cleanup.rows_deleted counter on provider.
func newRowsCleaned(provider metric.MeterProvider) (metric.Int64Counter, error) {
	counter, err := provider.Meter(inbox.MeterName).Int64Counter(inbox.MetricRowsCleaned,
		metric.WithDescription("Inbox rows deleted by retention cleanup"), metric.WithUnit("{row}"))
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: cleanup: metrics: %w", err)
	}
	return counter, nil
}

// CleanupProgress is the state of a cleanup pass, as given to CleanupConfig.Progress.
type CleanupProgress struct {
	// Batches is the number of batches done; Batch the rows the last one deleted.
	Batches int
	Batch   int64
	// Deleted is the number of rows deleted so far.
	Deleted int64
	// Elapsed is the time since the pass took its lock.
	Elapsed time.Duration
	// Done is set on the last call: the last batch found fewer rows than BatchSize.
	Done bool
}

func (c *CleanupConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultCleanupBatchSize
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
}

func (c CleanupConfig) validate() error {
	if c.BatchSize < 0 {
		return fmt.Errorf("sqlinbox: negative cleanup BatchSize %d", c.BatchSize)
	}
	if c.Pause < 0 {
		return fmt.Errorf("sqlinbox: negative cleanup Pause %s", c.Pause)
	}
	return nil
}

func validateOlderThan(olderThan time.Duration) error {
	if olderThan < time.Microsecond {
		return fmt.Errorf("sqlinbox: cleanup retention %s: want at least 1µs (0 would delete every claim)", olderThan)
	}
	return nil
}

// cleanupStatements is what a cleanup sends, rendered once at construction.
type cleanupStatements struct {
	dialect                        Dialect
	table                          string
	cleanup, expired, lock, unlock string
	lockKey                        any
}

func newCleanupStatements(dialect Dialect, table Table) cleanupStatements {
	s := cleanupStatements{
		dialect: dialect,
		table:   table.Name,
		cleanup: render(dialect.Cleanup, table),
		expired: render(dialect.Expired, table),
		lock:    dialect.CleanupLock,
		unlock:  dialect.CleanupUnlock,
	}
	if table.Schema != "" {
		s.table = table.Schema + "." + table.Name
	}
	if dialect.CleanupLockKey != nil {
		s.lockKey = dialect.CleanupLockKey(table)
	}
	return s
}

// args returns the parameters of the cleanup statement (batchSize > 0) or the expired one.
func (s cleanupStatements) args(olderThan time.Duration, batchSize int) ([]any, error) {
	if s.cleanup == "" || s.expired == "" || s.dialect.CleanupAge == nil {
		return nil, fmt.Errorf("sqlinbox: dialect %q has no cleanup", s.dialect.Name)
	}
	age := s.dialect.CleanupAge(olderThan)
	if batchSize == 0 {
		return []any{age}, nil
	}
	return []any{age, batchSize}, nil
}

// cleanupSession is the one connection a pass runs on: its lock is a session lock, taken
// and released on that connection.
type cleanupSession interface {
	exec(ctx context.Context, query string, args ...any) (int64, error)
	queryInt(ctx context.Context, query string, args ...any) (sql.NullInt64, error)
}

// pass runs one cleanup on session. broken reports that the lock could not be released:
// the caller must close the connection, which releases it.
func (s cleanupStatements) pass(ctx context.Context, session cleanupSession, olderThan time.Duration,
	config CleanupConfig,
) (deleted int64, broken bool, err error) {
	if s.lock != "" {
		got, err := session.queryInt(ctx, s.lock, s.lockKey)
		if err != nil {
			return 0, false, fmt.Errorf("sqlinbox: cleanup: take the lock: %w", err)
		}
		if !got.Valid || got.Int64 != 1 {
			return 0, false, ErrCleanupBusy
		}
		defer func() {
			unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			released, unlockErr := session.queryInt(unlockCtx, s.unlock, s.lockKey)
			if unlockErr == nil && (!released.Valid || released.Int64 != 1) {
				unlockErr = errors.New("the lock was not held")
			}
			if unlockErr != nil {
				broken = true
				err = errors.Join(err, fmt.Errorf("sqlinbox: cleanup: release the lock: %w", unlockErr))
			}
		}()
	}
	rowsCleaned := config.rowsCleaned
	if rowsCleaned == nil {
		if rowsCleaned, err = newRowsCleaned(config.MeterProvider); err != nil {
			return 0, false, err
		}
	}
	tableAttr := metric.WithAttributes(attribute.String("table", s.table))
	start := time.Now()
	var progress CleanupProgress
	report := func() {
		if config.Progress != nil {
			progress.Elapsed = time.Since(start)
			config.Progress(progress)
		}
	}
	report()
	args, err := s.args(olderThan, config.BatchSize)
	if err != nil {
		return 0, false, err
	}
	var pause *time.Timer
	for {
		n, err := session.exec(ctx, s.cleanup, args...)
		if err != nil {
			return progress.Deleted, false, fmt.Errorf("sqlinbox: cleanup: batch %d: %w", progress.Batches+1, err)
		}
		rowsCleaned.Add(ctx, n, tableAttr)
		progress.Batches++
		progress.Batch = n
		progress.Deleted += n
		progress.Done = n < int64(config.BatchSize)
		report()
		if progress.Done {
			return progress.Deleted, false, nil
		}
		if config.Pause <= 0 {
			if err := ctx.Err(); err != nil {
				return progress.Deleted, false, fmt.Errorf("sqlinbox: cleanup: %w", err)
			}
			continue
		}
		if pause == nil {
			pause = time.NewTimer(config.Pause)
			defer pause.Stop()
		} else {
			pause.Reset(config.Pause)
		}
		select {
		case <-ctx.Done():
			return progress.Deleted, false, fmt.Errorf("sqlinbox: cleanup: %w", ctx.Err())
		case <-pause.C:
		}
	}
}

func prepareCleanup(olderThan time.Duration, config *CleanupConfig) error {
	if err := validateOlderThan(olderThan); err != nil {
		return err
	}
	config.setDefaults()
	return config.validate()
}

// Cleanup deletes the claims older than olderThan, by the database's clock (the one that set
// processed_at), of every consumer, in batches of config.BatchSize rows, each its own
// transaction, until a batch finds fewer; it returns the number of rows deleted, also when
// it stops early with an error (a cancelled ctx, a failed statement).
//
// One cleanup of a table runs at a time across every process: Cleanup takes a PostgreSQL
// advisory lock, keyed by the table's OID, on one pool connection for the whole pass, and
// returns ErrCleanupBusy at once if another cleanup holds it. Should releasing the lock fail,
// the connection is closed, which releases it.
//
// A row deleted while a copy of its message can still arrive lets that copy be processed
// again: choose olderThan longer than the longest redelivery path (docs/operating.md).
func (s *PgxStore) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	if err := prepareCleanup(olderThan, &config); err != nil {
		return 0, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: acquire a connection: %w", err)
	}
	deleted, broken, err := s.sql.cleanup.pass(ctx, pgxSession{conn.Conn()}, olderThan, config)
	if broken {
		// Closing the connection ends the session and with it the lock.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	} else {
		conn.Release()
	}
	return deleted, err
}

// CountExpired returns the number of claims older than olderThan: what Cleanup would delete
// now.
func (s *PgxStore) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := validateOlderThan(olderThan); err != nil {
		return 0, err
	}
	args, err := s.sql.cleanup.args(olderThan, 0)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.sql.cleanup.expired, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlinbox: count expired claims: %w", err)
	}
	return n, nil
}

// Cleanup deletes the claims older than olderThan, by the database's clock (the one that set
// processed_at), of every consumer, in batches of config.BatchSize rows, each its own
// transaction, until a batch finds fewer; it returns the number of rows deleted, also when
// it stops early with an error (a cancelled ctx, a failed statement).
//
// One cleanup of a table runs at a time: on PostgreSQL Cleanup takes an advisory lock keyed
// by the table's OID, on MySQL/MariaDB a named lock (GET_LOCK) for the database and table,
// on one connection for the whole pass, and returns ErrCleanupBusy at once if another
// cleanup holds it. SQLite takes no lock: its single writer runs one batch at a time.
//
// A row deleted while a copy of its message can still arrive lets that copy be processed
// again: choose olderThan longer than the longest redelivery path (docs/operating.md).
func (s *SQLStore) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	if err := prepareCleanup(olderThan, &config); err != nil {
		return 0, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: get a connection: %w", err)
	}
	deleted, broken, err := s.sql.cleanup.pass(ctx, sqlSession{conn}, olderThan, config)
	if broken {
		// driver.ErrBadConn makes database/sql close the connection, which ends the
		// session and with it the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
	return deleted, err
}

// CountExpired returns the number of claims older than olderThan: what Cleanup would delete
// now.
func (s *SQLStore) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := validateOlderThan(olderThan); err != nil {
		return 0, err
	}
	args, err := s.sql.cleanup.args(olderThan, 0)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, s.sql.cleanup.expired, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlinbox: count expired claims: %w", err)
	}
	return n, nil
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

package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Retention: the inbox keeps a row per processed message, and a row is only useful while a
// copy of its message can still arrive. Cleanup deletes the rows older than a retention, of
// every consumer (also of consumers that no longer exist), in bounded batches.

// Cleaner deletes claims older than a retention. PgxStore and SQLStore implement it.
type Cleaner interface {
	// Cleanup deletes the claims older than olderThan, by the database's clock (the one
	// that set processed_at), of every consumer, in batches of config.BatchSize rows, each
	// its own transaction, until a batch finds fewer; it returns the number of rows
	// deleted, also when it stops early with an error (a cancelled ctx, a failed
	// statement). One cleanup of a table runs at a time: a cleanup that finds another
	// holding the table's lock returns ErrCleanupBusy at once, having deleted nothing.
	//
	// A row deleted while a copy of its message can still arrive lets that copy be
	// processed again: choose olderThan longer than the longest redelivery path
	// (docs/operating.md).
	Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (deleted int64, err error)
}

var (
	_ Cleaner = (*PgxStore)(nil)
	_ Cleaner = (*SQLStore)(nil)
)

// DefaultCleanupBatchSize is the number of rows one cleanup statement deletes when
// CleanupConfig.BatchSize is 0.
const DefaultCleanupBatchSize = 10_000

// ErrCleanupBusy is returned by PgxStore.Cleanup and SQLStore.Cleanup, having deleted
// nothing, when another cleanup of the same table holds its lock (PostgreSQL: a
// transaction-level advisory lock; MySQL: a named lock, GET_LOCK). SQLite takes no lock and
// never returns it.
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
	dialect                                Dialect
	table                                  string
	cleanup, expired, txLock, lock, unlock string
	lockKey                                any
}

func newCleanupStatements(dialect Dialect, table Table) cleanupStatements {
	s := cleanupStatements{
		dialect: dialect,
		table:   table.Name,
		cleanup: render(dialect.Cleanup, table),
		expired: render(dialect.Expired, table),
		txLock:  dialect.CleanupTxLock,
	}
	if s.txLock == "" {
		s.lock, s.unlock = dialect.CleanupLock, dialect.CleanupUnlock
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

// countExpired counts, through session, the claims older than olderThan.
func (s cleanupStatements) countExpired(ctx context.Context, session cleanupSession, olderThan time.Duration) (int64, error) {
	if err := validateOlderThan(olderThan); err != nil {
		return 0, err
	}
	args, err := s.args(olderThan, 0)
	if err != nil {
		return 0, err
	}
	n, err := session.queryInt(ctx, s.expired, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: count expired claims: %w", err)
	}
	return n.Int64, nil
}

// cleanupSession runs a pass's statements: its batches, and the statements of its lock.
type cleanupSession interface {
	exec(ctx context.Context, query string, args ...any) (int64, error)
	queryInt(ctx context.Context, query string, args ...any) (sql.NullInt64, error)
}

// cleanupLock is the lock a pass holds from before its first batch to after its last.
type cleanupLock struct {
	// take tries to take the lock; false: another cleanup holds it.
	take func(ctx context.Context) (bool, error)
	// check, if set, fails if the lock is no longer held; it runs before each batch.
	check func(ctx context.Context) error
	// release releases the lock, held or not (take said which); an error means the caller
	// must close the connection the lock lives on, which releases it.
	release func(ctx context.Context, held bool) error
}

// queryOne runs query, which returns 1 for yes.
func queryOne(ctx context.Context, session cleanupSession, query string, key any) (bool, error) {
	got, err := session.queryInt(ctx, query, key)
	return err == nil && got.Valid && got.Int64 == 1, err
}

// sessionLock is the dialect's session lock, taken and released on session, the connection
// the batches run on.
func (s cleanupStatements) sessionLock(session cleanupSession) *cleanupLock {
	return &cleanupLock{
		take: func(ctx context.Context) (bool, error) { return queryOne(ctx, session, s.lock, s.lockKey) },
		release: func(ctx context.Context, held bool) error {
			if !held {
				return nil
			}
			released, err := queryOne(ctx, session, s.unlock, s.lockKey)
			if err == nil && !released {
				err = errors.New("the lock was not held")
			}
			return err
		},
	}
}

// txLockIn is the dialect's transaction lock, taken in tx, a transaction that only holds it;
// end ends that transaction.
func (s cleanupStatements) txLockIn(tx cleanupSession, end func(ctx context.Context) error) *cleanupLock {
	// The lock's statements are not cut short by ctx: a driver interrupts a statement by
	// closing its connection, and the server would drop the lock only once it noticed, after
	// the pass returned. A cancelled pass sends no more of them, stops at its next batch and
	// rolls back instead.
	query := func(ctx context.Context) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return queryOne(ctx, tx, s.txLock, s.lockKey)
	}
	return &cleanupLock{
		take: query,
		// Taking the lock again in the transaction that holds it succeeds: the transaction is
		// alive and still holds the lock.
		check: func(ctx context.Context) error {
			held, err := query(ctx)
			if err == nil && !held {
				err = errors.New("the lock's transaction no longer holds it")
			}
			return err
		},
		release: func(ctx context.Context, _ bool) error { return end(ctx) },
	}
}

// pass runs one cleanup: its batches on batches, each a transaction of its own, holding lock
// (nil: none). broken reports that the lock could not be released: the caller must close
// the connections it lives on, which releases it.
func (s cleanupStatements) pass(ctx context.Context, batches cleanupSession, lock *cleanupLock, olderThan time.Duration,
	config passConfig,
) (deleted int64, broken bool, err error) {
	if lock != nil {
		held, takeErr := lock.take(ctx)
		defer func() {
			unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if unlockErr := lock.release(unlockCtx, held); unlockErr != nil {
				broken = true
				err = errors.Join(err, fmt.Errorf("sqlinbox: cleanup: release the lock: %w", unlockErr))
			}
		}()
		if takeErr != nil {
			return 0, false, fmt.Errorf("sqlinbox: cleanup: take the lock: %w", takeErr)
		}
		if !held {
			return 0, false, ErrCleanupBusy
		}
	}
	rowsCleaned := config.rowsCleaned
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
		if lock != nil && lock.check != nil {
			if err := lock.check(ctx); err != nil {
				return progress.Deleted, false, fmt.Errorf("sqlinbox: cleanup: before batch %d: the lock: %w", progress.Batches+1, err)
			}
		}
		n, err := batches.exec(ctx, s.cleanup, args...)
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

// passConfig is one pass's CleanupConfig, with defaults, and its counter.
type passConfig struct {
	CleanupConfig
	rowsCleaned metric.Int64Counter
}

// preparePass validates a pass; rowsCleaned, if not nil, is the counter a RetentionRunner
// made once for all its passes.
func preparePass(olderThan time.Duration, config CleanupConfig, rowsCleaned metric.Int64Counter) (passConfig, error) {
	if err := validateOlderThan(olderThan); err != nil {
		return passConfig{}, err
	}
	config.setDefaults()
	if err := config.validate(); err != nil {
		return passConfig{}, err
	}
	if rowsCleaned == nil {
		var err error
		if rowsCleaned, err = newRowsCleaned(config.MeterProvider); err != nil {
			return passConfig{}, err
		}
	}
	return passConfig{config, rowsCleaned}, nil
}

// countedCleaner is a Cleaner that can count its rows on a counter made once.
type countedCleaner interface {
	cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig, rowsCleaned metric.Int64Counter) (int64, error)
}

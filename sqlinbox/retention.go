package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/inboxkit/watermill-inbox/inboxotel"
)

// Retention: the inbox keeps a row per processed message, and a row is only useful while a
// copy of its message can still arrive. Cleanup deletes the rows older than a retention, of
// every consumer (also of consumers that no longer exist), in bounded batches.

// Cleaner deletes claims older than a retention. [Store] implements it; a [RetentionRunner] runs
// one.
type Cleaner interface {
	// Cleanup deletes the claims older than olderThan, by the database's clock (the one
	// that set processed_at), of every consumer, in batches of config.BatchSize rows, each
	// its own transaction, until a batch finds fewer; it returns the number of rows
	// deleted, also when it stops early with an error (a cancelled ctx, a failed
	// statement). One cleanup of a table runs at a time: a cleanup that finds another
	// holding the table's lock returns [ErrCleanupBusy] at once, having deleted nothing.
	//
	// A row deleted while a copy of its message can still arrive lets that copy be
	// processed again: choose olderThan longer than the longest redelivery path
	// (docs/operating.md).
	Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (deleted int64, err error)
}

var (
	_ Cleaner        = (*Store)(nil)
	_ countedCleaner = (*Store)(nil)
)

// DefaultCleanupBatchSize is the number of rows one cleanup statement deletes when
// [CleanupConfig.BatchSize] is 0.
const DefaultCleanupBatchSize = 10_000

// ErrCleanupBusy is returned by [Store.Cleanup], having deleted nothing, when another cleanup of the same table holds its lock (PostgreSQL: a
// transaction-level advisory lock; [MySQL]: a named lock, GET_LOCK). [SQLite] takes no lock and
// never returns it.
var ErrCleanupBusy = errors.New("sqlinbox: another cleanup of this table is running")

// CleanupConfig configures one cleanup pass. The zero value is ready to use.
type CleanupConfig struct {
	// BatchSize is the most rows one DELETE removes; each batch is a transaction of its own,
	// so locks are held briefly and an interrupted pass keeps what it deleted.
	// Default: [DefaultCleanupBatchSize] (10,000).
	BatchSize int

	// Pause is how long to wait between batches, leaving the database to the claims.
	// Default 0: no pause.
	Pause time.Duration

	// Progress, if set, is called on the cleanup's goroutine: once when the pass has its lock
	// (Batches 0), then after each batch; the last call has Done set. The lock is held
	// during every call, so a slow Progress delays other cleanups, not claims.
	Progress func(CleanupProgress)

	// MeterProvider receives the inbox.cleanup.rows_deleted counter ([inboxotel.MetricRowsDeleted]),
	// with the attribute "table". Default: the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// newRowsCleaned creates the inbox.cleanup.rows_deleted counter on provider.
func newRowsCleaned(provider metric.MeterProvider) (metric.Int64Counter, error) {
	counter, err := provider.Meter(inboxotel.ScopeName).Int64Counter(inboxotel.MetricRowsDeleted,
		metric.WithDescription("Inbox rows deleted by retention cleanup"), metric.WithUnit("{row}"))
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: cleanup: metrics: %w", err)
	}
	return counter, nil
}

// CleanupProgress is the state of a cleanup pass, as given to [CleanupConfig.Progress].
type CleanupProgress struct {
	// Batches is the number of batches done.
	Batches int
	// BatchDeleted is the number of rows the last batch deleted.
	BatchDeleted int64
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

// Cleanup implements [Cleaner]. A pass holds the dialect's lock ([Dialect.CleanupLock]) from
// before its first batch to after its last. On PostgreSQL that is a transaction-level
// advisory lock keyed by the table's OID, in a transaction kept open on one connection for
// the pass while the batches run on the pool's other connections (a pool limited to one
// connection is refused); it ends with its transaction, also when the cleaner is killed, its
// connection lost, or a pooler in transaction mode sits between. On [MySQL]/MariaDB it is a
// named lock (GET_LOCK) for the database and table, a session lock taken, used and released
// on the one connection the pass runs on. [SQLite] takes no lock: its single writer runs one
// batch at a time.
func (s *Store) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	return s.cleanup(ctx, olderThan, config, nil)
}

func (s *Store) cleanup(ctx context.Context, olderThan time.Duration, cleanupConfig CleanupConfig, rowsCleaned metric.Int64Counter) (deleted int64, err error) {
	config, err := preparePass(olderThan, cleanupConfig, rowsCleaned)
	if err != nil {
		return 0, err
	}
	args, err := s.cleanupArgs(olderThan, config.BatchSize)
	if err != nil {
		return 0, err
	}
	if err := s.shapeKnown(ctx); err != nil {
		return 0, fmt.Errorf("sqlinbox: cleanup: %w", err)
	}
	sql := s.sql
	switch {
	case sql.lockTake == "":
		return s.pass(ctx, s.pool, nil, args, config)
	case sql.lockRelease == "":
		// The lock's transaction holds the lock on one connection; the batches need another.
		if n := s.pool.maxConns(); n > 0 && n < 2 {
			return 0, errors.New("sqlinbox: cleanup: the pool has one connection: a pass holds its lock on one and deletes on another")
		}
		err = s.pool.inTx(ctx, false, func(q querier) error {
			lock := &cleanupLock{session: q, take: sql.lockTake, key: sql.lockKey, recheck: true}
			deleted, err = s.pass(ctx, s.pool, lock, args, config)
			return err
		})
		return deleted, err
	}
	err = s.pool.hold(ctx, func(q querier) (bool, error) {
		lock := &cleanupLock{session: q, take: sql.lockTake, release: sql.lockRelease, key: sql.lockKey}
		var releaseErr error
		deleted, err = s.pass(ctx, q, lock, args, config)
		if lock.held {
			releaseErr = lock.releaseLock(ctx)
		}
		return releaseErr != nil, errors.Join(err, releaseErr)
	})
	return deleted, err
}

// CountExpired returns the number of claims older than olderThan: what Cleanup would delete
// now.
func (s *Store) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := validateOlderThan(olderThan); err != nil {
		return 0, err
	}
	args, err := s.cleanupArgs(olderThan, 0)
	if err != nil {
		return 0, err
	}
	if err := s.shapeKnown(ctx); err != nil {
		return 0, fmt.Errorf("sqlinbox: count expired claims: %w", err)
	}
	_, countExpired := s.sql.expiredSQL(s.marks())
	n, err := s.pool.queryInt(ctx, countExpired, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: count expired claims: %w", err)
	}
	return n.Int64, nil
}

// cleanupArgs returns the parameters of DeleteExpired (batchSize > 0) or CountExpired.
func (s *Store) cleanupArgs(olderThan time.Duration, batchSize int) ([]any, error) {
	if s.sql.deleteExpired == "" || s.sql.countExpired == "" {
		return nil, fmt.Errorf("sqlinbox: dialect %q has no cleanup", s.sql.dialect.Name())
	}
	age := s.sql.dialect.Age(olderThan)
	if batchSize == 0 {
		return []any{age}, nil
	}
	return []any{age, batchSize}, nil
}

// cleanupLock is the lock a pass holds from before its first batch to after its last, taken
// on session: the connection the batches run on (a session lock), or the transaction that
// holds it (a transaction lock, which that transaction's end releases).
type cleanupLock struct {
	session       querier
	take, release string
	key           any
	recheck       bool // before each batch, check that the transaction still holds the lock
	held          bool
}

// queryOne runs query, which returns 1 for yes.
func queryOne(ctx context.Context, q querier, query string, key any) (bool, error) {
	got, err := q.queryInt(ctx, query, key)
	return err == nil && got.Valid && got.Int64 == 1, err
}

// query runs the lock's take statement, which returns 1 if the lock is held. It is not cut
// short by ctx: a driver interrupts a statement by closing its connection, and the server
// would drop the lock only once it noticed, after the pass returned. A cancelled pass sends
// no more of them, stops at its next batch and releases the lock instead.
func (l *cleanupLock) query(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return queryOne(ctx, l.session, l.take, l.key)
}

// releaseLock releases a session lock; an error means the connection it lives on must be
// closed, which releases it.
func (l *cleanupLock) releaseLock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	released, err := queryOne(ctx, l.session, l.release, l.key)
	if err == nil && !released {
		err = errors.New("the lock was not held")
	}
	if err != nil {
		return fmt.Errorf("sqlinbox: cleanup: release the lock: %w", err)
	}
	return nil
}

// pass runs one cleanup: its batches on batches, each a transaction of its own, holding lock
// (nil: none).
func (s *Store) pass(ctx context.Context, batches querier, lock *cleanupLock, args []any, config passConfig) (int64, error) {
	if lock != nil {
		held, err := lock.query(ctx)
		if err != nil {
			return 0, fmt.Errorf("sqlinbox: cleanup: take the lock: %w", err)
		}
		if !held {
			return 0, ErrCleanupBusy
		}
		lock.held = true
	}
	tableAttr := metric.WithAttributes(attribute.String("table", s.sql.table.label()))
	start := time.Now()
	var progress CleanupProgress
	report := func() {
		if config.Progress != nil {
			progress.Elapsed = time.Since(start)
			config.Progress(progress)
		}
	}
	report()
	var pause *time.Timer
	for {
		if lock != nil && lock.recheck {
			// Taking the lock again in the transaction that holds it succeeds: the transaction
			// is alive and still holds the lock.
			held, err := lock.query(ctx)
			if err == nil && !held {
				err = errors.New("the lock's transaction no longer holds it")
			}
			if err != nil {
				return progress.Deleted, fmt.Errorf("sqlinbox: cleanup: before batch %d: the lock: %w", progress.Batches+1, err)
			}
		}
		deleteExpired, _ := s.sql.expiredSQL(s.marks())
		n, err := batches.exec(ctx, deleteExpired, args...)
		if err != nil {
			return progress.Deleted, fmt.Errorf("sqlinbox: cleanup: batch %d: %w", progress.Batches+1, err)
		}
		config.rowsCleaned.Add(ctx, n, tableAttr)
		progress.Batches++
		progress.BatchDeleted = n
		progress.Deleted += n
		progress.Done = n < int64(config.BatchSize)
		report()
		if progress.Done {
			return progress.Deleted, nil
		}
		if config.Pause <= 0 {
			if err := ctx.Err(); err != nil {
				return progress.Deleted, fmt.Errorf("sqlinbox: cleanup: %w", err)
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
			return progress.Deleted, fmt.Errorf("sqlinbox: cleanup: %w", ctx.Err())
		case <-pause.C:
		}
	}
}

// passConfig is one pass's [CleanupConfig], with defaults, and its counter.
type passConfig struct {
	CleanupConfig
	rowsCleaned metric.Int64Counter
}

// preparePass validates a pass; rowsCleaned, if not nil, is the counter a [RetentionRunner]
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

// countedCleaner is a [Cleaner] that can count its rows on a counter made once.
type countedCleaner interface {
	cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig, rowsCleaned metric.Int64Counter) (int64, error)
}

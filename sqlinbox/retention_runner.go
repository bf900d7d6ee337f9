package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"go.opentelemetry.io/otel/metric"
)

// DefaultRetentionInterval is the time between cleanup passes when
// [RetentionConfig.Interval] is 0.
const DefaultRetentionInterval = time.Hour

// DefaultRetentionRetryDelay is the wait before the first retry of a failed cleanup pass when
// [RetentionConfig.RetryDelay] is 0.
const DefaultRetentionRetryDelay = 10 * time.Second

// RetentionConfig configures a [RetentionRunner].
type RetentionConfig struct {
	// OlderThan is how long a claim is kept: a pass deletes the rows whose processed_at is
	// older, as Store.Cleanup's olderThan and the command line's -older-than. Required. Make it longer than the longest time in which a copy of a message can
	// still arrive (broker retention, retry and backoff windows, manual replays): a copy that
	// arrives after its row is gone is processed again. See docs/operating.md.
	OlderThan time.Duration

	// Interval is the time from the end of one pass to the start of the next, after a pass
	// that succeeded or found another instance's pass running.
	// Default: [DefaultRetentionInterval] (1 hour).
	Interval time.Duration

	// RetryDelay is the wait after a pass that failed (a lost connection, a database
	// restarting) before the next. It doubles with each failure in a row, up to Interval,
	// and each wait is shortened by a random part of up to a half, so that instances that
	// failed together do not retry together. Default: [DefaultRetentionRetryDelay] (10 s).
	RetryDelay time.Duration

	// Cleanup configures every pass: BatchSize, Pause, Progress and MeterProvider, with
	// [CleanupConfig]'s defaults.
	Cleanup CleanupConfig
}

func (c *RetentionConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultRetentionInterval
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetentionRetryDelay
	}
	c.Cleanup.setDefaults()
}

func (c RetentionConfig) validate() error {
	if err := validateOlderThan(c.OlderThan); err != nil {
		return err
	}
	if c.Interval < 0 {
		return fmt.Errorf("sqlinbox: negative retention Interval %s", c.Interval)
	}
	if c.RetryDelay < 0 {
		return fmt.Errorf("sqlinbox: negative retention RetryDelay %s", c.RetryDelay)
	}
	return c.Cleanup.validate()
}

// RetentionRunner runs a cleanup pass at start and then every Interval; a pass that fails
// is retried sooner ([RetentionConfig.RetryDelay]). Every instance of a service may run one:
// on PostgreSQL and [MySQL] a pass that finds another instance's pass running skips its turn
// ([ErrCleanupBusy]), so one instance deletes at a time.
type RetentionRunner struct {
	store       Cleaner
	config      RetentionConfig
	logger      watermill.LoggerAdapter
	rowsCleaned metric.Int64Counter // made once, for the passes of a countedCleaner

	// after and jitter are [time.After] and a random duration in [0, n); tests replace them.
	after  func(time.Duration) <-chan time.Time
	jitter func(n time.Duration) time.Duration
}

// NewRetentionRunner returns a runner of store's cleanup; a nil logger logs nothing.
func NewRetentionRunner(store Cleaner, config RetentionConfig, logger watermill.LoggerAdapter) (*RetentionRunner, error) {
	if store == nil {
		return nil, errors.New("sqlinbox: NewRetentionRunner: store is nil")
	}
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	rowsCleaned, err := newRowsCleaned(config.Cleanup.MeterProvider)
	if err != nil {
		return nil, err
	}
	return &RetentionRunner{
		store:       store,
		config:      config,
		logger:      logger,
		rowsCleaned: rowsCleaned,
		after:       time.After,
		jitter:      randomJitter,
	}, nil
}

// Run runs passes until ctx is done, then returns nil. After a pass that deletes what it
// should, or finds another instance's pass running, the next starts Interval later. After a
// pass that fails, it is logged and the next starts after RetryDelay, doubled with each
// failure in a row up to Interval, less a random part of up to a half. A pass cancelled by
// ctx keeps the batches it committed.
func (r *RetentionRunner) Run(ctx context.Context) error {
	var wait time.Duration // none before the first pass
	failures := 0
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-r.after(wait):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		err := r.pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || errors.Is(err, ErrCleanupBusy) {
			failures = 0
			wait = r.config.Interval
			continue
		}
		failures++
		wait = r.retryDelay(failures)
		r.logger.Info("Inbox cleanup will be retried", watermill.LogFields{
			"failures": failures, "retry_in": wait.String(),
		})
	}
}

// retryDelay is the wait after the given number of failed passes in a row: RetryDelay
// doubled for each failure after the first, at most Interval, less a random part of up to a
// half.
func (r *RetentionRunner) retryDelay(failures int) time.Duration {
	return backoff(r.config.RetryDelay, r.config.Interval, failures, r.jitter)
}

// backoff is the wait after the given number of failed passes in a row of a runner: first
// doubled for each failure after the first, at most limit, less jitter of up to a half.
func backoff(first, limit time.Duration, failures int, jitter func(n time.Duration) time.Duration) time.Duration {
	d := first
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - jitter(d/2)
}

// randomJitter is a random duration in [0, n].
func randomJitter(n time.Duration) time.Duration { return time.Duration(rand.Int64N(int64(n) + 1)) }

func (r *RetentionRunner) pass(ctx context.Context) error {
	start := time.Now()
	var deleted int64
	var err error
	if counted, ok := r.store.(countedCleaner); ok {
		deleted, err = counted.cleanup(ctx, r.config.OlderThan, r.config.Cleanup, r.rowsCleaned)
	} else {
		deleted, err = r.store.Cleanup(ctx, r.config.OlderThan, r.config.Cleanup)
	}
	fields := watermill.LogFields{
		"deleted":   deleted,
		"retention": r.config.OlderThan.String(),
		"duration":  time.Since(start).String(),
	}
	switch {
	case errors.Is(err, ErrCleanupBusy):
		r.logger.Debug("Inbox cleanup skipped: another instance is running one", fields)
	case err != nil && ctx.Err() != nil:
		r.logger.Info("Inbox cleanup stopped", fields)
	case err != nil:
		r.logger.Error("Inbox cleanup failed", err, fields)
	default:
		r.logger.Info("Inbox cleanup done", fields)
	}
	return err
}

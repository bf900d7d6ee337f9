package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// DefaultRetentionInterval is the time between cleanup passes when
// RetentionConfig.Interval is 0.
const DefaultRetentionInterval = time.Hour

// Cleaner deletes claims older than a retention. PgxStore and SQLStore implement it.
type Cleaner interface {
	Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (deleted int64, err error)
}

var (
	_ Cleaner = (*PgxStore)(nil)
	_ Cleaner = (*SQLStore)(nil)
)

// RetentionConfig configures a RetentionRunner.
type RetentionConfig struct {
	// Retention is how long a claim is kept: a pass deletes the rows whose processed_at is
	// older. Required. Make it longer than the longest time in which a copy of a message can
	// still arrive (broker retention, retry and backoff windows, manual replays): a copy that
	// arrives after its row is gone is processed again. See docs/operating.md.
	Retention time.Duration

	// Interval is the time from the end of one pass to the start of the next.
	// Default: DefaultRetentionInterval (1 hour).
	Interval time.Duration

	// BatchSize and Pause are passed to each pass as CleanupConfig.BatchSize (default
	// 10,000) and CleanupConfig.Pause (default 0).
	BatchSize int
	Pause     time.Duration

	// Progress, if set, is passed to each pass as CleanupConfig.Progress.
	Progress func(CleanupProgress)
}

func (c *RetentionConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultRetentionInterval
	}
}

func (c RetentionConfig) validate() error {
	if err := validateOlderThan(c.Retention); err != nil {
		return err
	}
	if c.Interval < 0 {
		return fmt.Errorf("sqlinbox: negative retention Interval %s", c.Interval)
	}
	return CleanupConfig{BatchSize: c.BatchSize, Pause: c.Pause}.validate()
}

// RetentionRunner runs a cleanup pass at start and then every Interval. Every instance of a
// service may run one: on PostgreSQL and MySQL a pass that finds another instance's pass
// running skips its turn (ErrCleanupBusy), so one instance deletes at a time.
type RetentionRunner struct {
	store  Cleaner
	config RetentionConfig
	logger watermill.LoggerAdapter
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
	return &RetentionRunner{store: store, config: config, logger: logger}, nil
}

// Run runs passes until ctx is done, then returns nil. A pass that fails is logged and
// retried at the next interval; a pass cancelled by ctx keeps the batches it committed.
func (r *RetentionRunner) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		r.pass(ctx)
		timer.Reset(r.config.Interval)
	}
}

func (r *RetentionRunner) pass(ctx context.Context) {
	start := time.Now()
	deleted, err := r.store.Cleanup(ctx, r.config.Retention, CleanupConfig{
		BatchSize: r.config.BatchSize,
		Pause:     r.config.Pause,
		Progress:  r.config.Progress,
	})
	fields := watermill.LogFields{
		"deleted":   deleted,
		"retention": r.config.Retention.String(),
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
}

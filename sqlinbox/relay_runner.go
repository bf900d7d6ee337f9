package sqlinbox

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// RelayRunner publishes a table's unpublished records (see [RelayConfig]): a pass at start,
// then one every Interval, at once again after a pass that found a full batch, and sooner
// after one that failed ([DefaultRetentionRetryDelay] doubled with each failure in a row, up
// to Interval). Every instance of a service may run one on the same table: each pass takes
// its records with row locks that another pass skips (FOR UPDATE SKIP LOCKED on PostgreSQL
// and [MySQL]/MariaDB; [SQLite]'s one writer), so no record is published by two passes at
// once, and pooler-safe, in one transaction per pass. A record whose publish fails stays
// unpublished and is tried again by the next pass: nothing is dropped.
type RelayRunner struct {
	store   *Store
	config  RelayConfig
	logger  watermill.LoggerAdapter
	metrics relayMetrics
}

// NewRelayRunner returns a relay of store's table; a nil logger logs nothing. Whether the
// table has the column unpublished is checked by each pass, whose error then wraps
// [ErrRelayUnavailable].
func NewRelayRunner(store *Store, config RelayConfig, logger watermill.LoggerAdapter) (*RelayRunner, error) {
	if store == nil {
		return nil, errors.New("sqlinbox: NewRelayRunner: store is nil")
	}
	config.setDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	metrics, err := newRelayMetrics(config.MeterProvider, store.sql.table)
	if err != nil {
		return nil, err
	}
	return &RelayRunner{store: store, config: config, logger: logger, metrics: metrics}, nil
}

// Run runs passes until ctx is done, then returns nil. A pass that fails is logged, and
// retried sooner than Interval.
func (r *RelayRunner) Run(ctx context.Context) error {
	var wait time.Duration
	failures := 0
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		taken, _, err := r.pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil && taken == r.config.BatchSize:
			failures, wait = 0, 0 // more may wait
		case err == nil:
			failures, wait = 0, r.config.Interval
		default:
			failures++
			wait = r.retryDelay(failures)
			r.logger.Info("Inbox relay will be retried", watermill.LogFields{"failures": failures, "retry_in": wait.String()})
		}
	}
}

// Pass runs one pass now: it publishes up to BatchSize unpublished records older than Delay
// and marks them, and returns how many it published. Run calls it; call it yourself to
// publish from a job of your own.
func (r *RelayRunner) Pass(ctx context.Context) (published int, err error) {
	_, published, err = r.pass(ctx)
	return published, err
}

func (r *RelayRunner) pass(ctx context.Context) (taken, published int, err error) {
	start := time.Now()
	taken, published, err = r.store.relayPass(ctx, r.config)
	r.metrics.published.Add(ctx, int64(published), r.metrics.table)
	fields := watermill.LogFields{"table": r.store.sql.table.Quoted, "published": published, "duration": time.Since(start).String()}
	if backlog, backlogErr := r.store.Backlog(ctx); backlogErr == nil {
		r.metrics.backlog.Record(ctx, backlog.Records, r.metrics.table)
		r.metrics.oldest.Record(ctx, backlog.OldestAge.Seconds(), r.metrics.table)
		fields["backlog"] = backlog.Records
	}
	switch {
	case err != nil && ctx.Err() != nil:
		r.logger.Info("Inbox relay stopped", fields)
	case err != nil:
		r.logger.Error("Inbox relay pass failed; its records stay for the next", err, fields)
	case published > 0:
		r.logger.Info("Inbox relay published records whose own publish did not happen", fields)
	default:
		r.logger.Debug("Inbox relay found nothing to publish", fields)
	}
	return taken, published, err
}

// retryDelay is DefaultRetentionRetryDelay (at most Interval) doubled for each failure after
// the first, at most Interval, less a random part of up to a half.
func (r *RelayRunner) retryDelay(failures int) time.Duration {
	return backoff(min(DefaultRetentionRetryDelay, r.config.Interval), r.config.Interval, failures, randomJitter)
}

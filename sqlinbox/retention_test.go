package sqlinbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

type noCleaner struct{}

func (noCleaner) Cleanup(context.Context, time.Duration, sqlinbox.CleanupConfig) (int64, error) {
	return 0, nil
}

func TestNewRetentionRunnerValidates(t *testing.T) {
	for _, tt := range []struct {
		name   string
		store  sqlinbox.Cleaner
		config sqlinbox.RetentionConfig
		ok     bool
	}{
		{"valid", noCleaner{}, sqlinbox.RetentionConfig{OlderThan: 72 * time.Hour}, true},
		{"nil store", nil, sqlinbox.RetentionConfig{OlderThan: time.Hour}, false},
		{"no retention", noCleaner{}, sqlinbox.RetentionConfig{}, false},
		{"negative interval", noCleaner{}, sqlinbox.RetentionConfig{OlderThan: time.Hour, Interval: -1}, false},
		{"negative batch size", noCleaner{}, sqlinbox.RetentionConfig{OlderThan: time.Hour, Cleanup: sqlinbox.CleanupConfig{BatchSize: -1}}, false},
		{"negative pause", noCleaner{}, sqlinbox.RetentionConfig{OlderThan: time.Hour, Cleanup: sqlinbox.CleanupConfig{Pause: -1}}, false},
		{"negative retry delay", noCleaner{}, sqlinbox.RetentionConfig{OlderThan: time.Hour, RetryDelay: -1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sqlinbox.NewRetentionRunner(tt.store, tt.config, nil)
			if (err == nil) != tt.ok {
				t.Errorf("err = %v, want ok = %v", err, tt.ok)
			}
		})
	}
}

// Run returns nil once its context is done.
func TestRetentionRunnerStopsWithItsContext(t *testing.T) {
	r, err := sqlinbox.NewRetentionRunner(noCleaner{}, sqlinbox.RetentionConfig{OlderThan: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// scriptedCleaner returns the errors of its script in turn; after the last it cancels the
// runner's context.
type scriptedCleaner struct {
	script []error
	calls  int
	cancel context.CancelFunc
}

func (c *scriptedCleaner) Cleanup(context.Context, time.Duration, sqlinbox.CleanupConfig) (int64, error) {
	if c.calls == len(c.script) {
		c.cancel()
		return 0, context.Canceled
	}
	err := c.script[c.calls]
	c.calls++
	return 0, err
}

// A failed pass is retried after RetryDelay, doubled with each failure in a row up to
// Interval and shortened by the jitter; a pass that succeeds, or finds another instance's
// running, waits a whole Interval.
func TestRetentionRunnerBacksOffAfterFailures(t *testing.T) {
	failed := errors.New("connection refused")
	script := []error{failed, failed, failed, failed, nil, sqlinbox.ErrCleanupBusy, failed, nil}
	const s = time.Second
	for _, tt := range []struct {
		name   string
		jitter func(time.Duration) time.Duration
		want   []time.Duration
	}{
		{"no jitter", func(time.Duration) time.Duration { return 0 }, []time.Duration{10 * s, 20 * s, 40 * s, 60 * s, 60 * s, 60 * s, 10 * s, 60 * s}},
		{"most jitter", func(n time.Duration) time.Duration { return n }, []time.Duration{5 * s, 10 * s, 20 * s, 30 * s, 60 * s, 60 * s, 5 * s, 60 * s}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cleaner := &scriptedCleaner{script: script, cancel: cancel}
			r, err := sqlinbox.NewRetentionRunner(cleaner, sqlinbox.RetentionConfig{
				OlderThan: time.Hour, Interval: time.Minute, RetryDelay: 10 * time.Second,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waits := instantWaits(r, tt.jitter)
			if err := r.Run(ctx); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if cleaner.calls != len(script) {
				t.Errorf("%d passes, want %d", cleaner.calls, len(script))
			}
			if !slices.Equal(*waits, tt.want) {
				t.Errorf("waits %v, want %v", *waits, tt.want)
			}
		})
	}
}

// With the real jitter, every wait after a failure lies between half its bound and the
// bound, and never exceeds Interval.
func TestRetentionRunnerJitterStaysInBounds(t *testing.T) {
	failed := errors.New("database restarting")
	script := make([]error, 50)
	for i := range script {
		script[i] = failed
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := sqlinbox.NewRetentionRunner(&scriptedCleaner{script: script, cancel: cancel}, sqlinbox.RetentionConfig{
		OlderThan: time.Hour, Interval: 5 * time.Minute, RetryDelay: time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits := instantWaits(r, nil) // nil jitter: keep the runner's own
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	bound := time.Second
	for i, w := range *waits {
		if w < bound/2 || w > bound {
			t.Errorf("wait %d = %s, want within [%s, %s]", i+1, w, bound/2, bound)
		}
		bound = min(2*bound, 5*time.Minute)
	}
}

// instantWaits makes r's waits end at once and records how long each was; jitter, if not
// nil, replaces the runner's.
func instantWaits(r *sqlinbox.RetentionRunner, jitter func(time.Duration) time.Duration) *[]time.Duration {
	waits := new([]time.Duration)
	sqlinbox.SetRunnerClock(r, func(d time.Duration) <-chan time.Time {
		*waits = append(*waits, d)
		fired := make(chan time.Time, 1)
		fired <- time.Time{}
		return fired
	}, jitter)
	return waits
}

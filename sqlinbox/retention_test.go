package sqlinbox_test

import (
	"context"
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
		{"valid", noCleaner{}, sqlinbox.RetentionConfig{Retention: 72 * time.Hour}, true},
		{"nil store", nil, sqlinbox.RetentionConfig{Retention: time.Hour}, false},
		{"no retention", noCleaner{}, sqlinbox.RetentionConfig{}, false},
		{"negative interval", noCleaner{}, sqlinbox.RetentionConfig{Retention: time.Hour, Interval: -1}, false},
		{"negative batch size", noCleaner{}, sqlinbox.RetentionConfig{Retention: time.Hour, BatchSize: -1}, false},
		{"negative pause", noCleaner{}, sqlinbox.RetentionConfig{Retention: time.Hour, Pause: -1}, false},
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
	r, err := sqlinbox.NewRetentionRunner(noCleaner{}, sqlinbox.RetentionConfig{Retention: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

package sqlinbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestCleanupSQL(t *testing.T) {
	tests := []struct {
		dialect sqlinbox.Dialect
		table   string
		want    string
	}{
		{sqlinbox.Postgres, "inbox", `DELETE FROM "inbox" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "inbox" WHERE processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2))`},
		{sqlinbox.MySQL, "test.inbox", "DELETE FROM `test`.`inbox` WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?"},
		{sqlinbox.SQLite, "inbox", `DELETE FROM "inbox" WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM "inbox" WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) ORDER BY processed_at LIMIT ?)`},
	}
	for _, tt := range tests {
		t.Run(tt.dialect.String(), func(t *testing.T) {
			got, err := sqlinbox.CleanupSQL(tt.dialect, tt.table)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("CleanupSQL =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	if _, err := sqlinbox.CleanupSQL(sqlinbox.Postgres, `inbox"; DROP TABLE x; --`); err == nil {
		t.Error("CleanupSQL accepted an invalid table name")
	}
	if _, err := sqlinbox.CleanupSQL(sqlinbox.Dialect{}, "inbox"); err == nil {
		t.Error("CleanupSQL accepted the zero Dialect")
	}
}

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

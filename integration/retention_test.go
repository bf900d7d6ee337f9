package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// OlderThan: Cleanup deletes claims older than the retention, of every consumer,
// in batches; one cleanup of a table runs at a time; claims keep working meanwhile.

// cleanerStore is what both stores offer for retention.
type cleanerStore interface {
	sqlinbox.Cleaner
	CountExpired(ctx context.Context, olderThan time.Duration) (int64, error)
}

func (b *backend) cleaner(t *testing.T) cleanerStore {
	t.Helper()
	c, ok := b.store.(cleanerStore)
	if !ok {
		t.Fatalf("%T has no Cleanup", b.store)
	}
	return c
}

// retentionSQL is the tests' own SQL to make claims old, in one database's syntax.
type retentionSQL struct {
	// fill inserts n claims aged age into table: consumers prefix+"0".."2" and keys
	// prefix+"1".."n".
	fill func(table, prefix string, n int, age time.Duration) (query string, args []any)
	// ago is an expression for the time ? seconds ago.
	ago string
}

var (
	postgresRetentionSQL = retentionSQL{
		fill: func(table, prefix string, n int, age time.Duration) (string, []any) {
			return "INSERT INTO " + table + " (consumer, message_id, processed_at) " +
					"SELECT ?::text || (g % 3), ?::text || g, now() - make_interval(secs => ?::float8) FROM generate_series(1, ?::int) g",
				[]any{prefix, prefix, age.Seconds(), n}
		},
		ago: "now() - make_interval(secs => ?::float8)",
	}
	mysqlRetentionSQL = retentionSQL{
		fill: func(table, prefix string, n int, age time.Duration) (string, []any) {
			return fmt.Sprintf("INSERT INTO %s (consumer, message_id, processed_at) "+
					"SELECT CONCAT(?, seq %% 3), CONCAT(?, seq), UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND FROM seq_1_to_%d", table, n),
				[]any{prefix, prefix, age.Microseconds()}
		},
		ago: "UTC_TIMESTAMP(6) - INTERVAL ? SECOND",
	}
	sqliteRetentionSQL = retentionSQL{
		fill: func(table, prefix string, n int, age time.Duration) (string, []any) {
			return "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) " +
					"INSERT INTO " + table + " (consumer, message_id, processed_at) " +
					"SELECT ? || (n % 3), ? || n, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) FROM g",
				[]any{n, prefix, prefix, fmt.Sprintf("-%f seconds", age.Seconds())}
		},
		ago: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || ? || ' seconds')",
	}
)

// fillClaims inserts n claims aged age, in one statement: consumers prefix+"0".."2" (none of
// which has a handler) and keys prefix+"1".."n".
func (b *backend) fillClaims(t *testing.T, prefix string, n int, age time.Duration) {
	t.Helper()
	query, args := b.retentionSQL.fill(b.table, prefix, n, age)
	if err := b.direct.exec(context.Background(), query, args...); err != nil {
		t.Fatalf("fill %d claims: %v", n, err)
	}
}

// age sets processed_at of the claim (consumer, key) to age ago.
func (b *backend) age(t *testing.T, consumer, key string, age time.Duration) {
	t.Helper()
	err := b.direct.exec(context.Background(), "UPDATE "+b.table+" SET processed_at = "+b.retentionSQL.ago+
		" WHERE consumer = ? AND message_id = ?", age.Seconds(), consumer, key)
	if err != nil {
		t.Fatal(err)
	}
}

func sortedBackends() []string {
	names := make([]string, 0, len(backends))
	for name := range backends {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Rows older than the retention go, of every consumer, in batches; newer rows stay; a copy
// of a kept message is still a duplicate, a copy of a deleted one is processed again.
func TestRetentionDeletesOnlyExpiredClaims(t *testing.T) {
	for _, name := range sortedBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backends[name](t)
			c := b.cleaner(t)
			ctx := context.Background()

			b.fillClaims(t, "gone-", 2500, 2*time.Hour)     // consumers that no longer exist
			b.fillClaims(t, "recent-", 300, 10*time.Minute) // inside the retention
			runs := map[string]int{}                        // the handler runs one message at a time here
			h := b.handler(t, "billing", nil, func(msg *message.Message) error {
				runs[msg.UUID]++
				return nil
			})
			for _, key := range []string{"kept", "expired"} {
				if err := deliver(ctx, h, key); err != nil {
					t.Fatal(err)
				}
			}
			b.age(t, "billing", "expired", 2*time.Hour)

			if n, err := c.CountExpired(ctx, time.Hour); err != nil || n != 2501 {
				t.Fatalf("CountExpired = %d, %v; want 2501", n, err)
			}
			var calls []sqlinbox.CleanupProgress
			deleted, err := c.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{
				BatchSize: 1000,
				Progress:  func(p sqlinbox.CleanupProgress) { calls = append(calls, p) },
			})
			if err != nil {
				t.Fatal(err)
			}
			if deleted != 2501 {
				t.Errorf("deleted %d rows, want 2501", deleted)
			}
			var batches []int64
			for _, p := range calls {
				batches = append(batches, p.BatchDeleted)
			}
			if want := []int64{0, 1000, 1000, 501}; !slices.Equal(batches, want) {
				t.Errorf("progress batches %v, want %v", batches, want)
			}
			if last := calls[len(calls)-1]; !last.Done || last.Deleted != 2501 || last.Batches != 3 {
				t.Errorf("last progress %+v: want Done, 2501 deleted in 3 batches", last)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), 301)
			wantRows(t, "recent claims left", b.rows(t, b.table, "WHERE consumer LIKE 'recent-%'"), 300)
			wantRows(t, "claims of gone consumers left", b.rows(t, b.table, "WHERE consumer LIKE 'gone-%'"), 0)
			if n, err := c.CountExpired(ctx, time.Hour); err != nil || n != 0 {
				t.Errorf("CountExpired after cleanup = %d, %v; want 0", n, err)
			}

			// The kept claim still catches its duplicate; the deleted one does not: the
			// reason the retention must outlast every redelivery path.
			for _, key := range []string{"kept", "expired"} {
				if err := deliver(ctx, h, key); err != nil {
					t.Fatal(err)
				}
			}
			if runs["kept"] != 1 {
				t.Errorf("duplicate of a kept claim: handler ran %d times, want 1", runs["kept"])
			}
			wantRows(t, "invoices for the kept key", b.invoices(t, "billing", "kept"), 1)
			if runs["expired"] != 2 {
				t.Errorf("copy of a deleted claim: handler ran %d times, want 2 (processed again)", runs["expired"])
			}

			// A pass with nothing to delete does one batch and finishes.
			calls = nil
			deleted, err = c.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{
				Progress: func(p sqlinbox.CleanupProgress) { calls = append(calls, p) },
			})
			if err != nil || deleted != 0 || len(calls) != 2 || !calls[1].Done {
				t.Errorf("empty pass: deleted %d, %v, progress %+v", deleted, err, calls)
			}

			for _, bad := range []struct {
				olderThan time.Duration
				config    sqlinbox.CleanupConfig
			}{
				{0, sqlinbox.CleanupConfig{}},
				{-time.Hour, sqlinbox.CleanupConfig{}},
				{time.Hour, sqlinbox.CleanupConfig{BatchSize: -1}},
				{time.Hour, sqlinbox.CleanupConfig{Pause: -time.Second}},
			} {
				if _, err := c.Cleanup(ctx, bad.olderThan, bad.config); err == nil {
					t.Errorf("Cleanup(%s, %+v): no error", bad.olderThan, bad.config)
				}
			}
			// 301 kept, plus the new claim of "expired".
			wantRows(t, "claims left after invalid calls", b.rows(t, b.table, ""), 302)
		})
	}
}

// lockingBackend reports whether the backend's cleanup takes a lock (all but SQLite, whose
// single writer serialises the batches).
func lockingBackend(b *backend) bool {
	take, _, _ := b.dialect.CleanupLock(sqlinbox.Table{Name: b.table, Quoted: b.table})
	return take != ""
}

// A cleanup held in the middle of its pass keeps every other cleanup of the table out:
// the second returns ErrCleanupBusy having deleted nothing, and runs once the first is done.
func TestRetentionSecondCleanupWaitsForTheFirst(t *testing.T) {
	for _, name := range sortedBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backends[name](t)
			c := b.cleaner(t)
			ctx := context.Background()
			b.fillClaims(t, "old-", 300, 2*time.Hour)

			paused, resume := make(chan struct{}), make(chan struct{})
			type result struct {
				deleted int64
				err     error
			}
			first := make(chan result, 1)
			go func() {
				n, err := c.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{BatchSize: 100, Progress: func(p sqlinbox.CleanupProgress) {
					if p.Batches == 1 {
						close(paused)
						<-resume
					}
				}})
				first <- result{n, err}
			}()
			select {
			case <-paused:
			case r := <-first:
				t.Fatalf("first cleanup ended before its first batch was reported: %+v", r)
			}

			second, err := c.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{BatchSize: 100})
			if lockingBackend(b) {
				if !errors.Is(err, sqlinbox.ErrCleanupBusy) || second != 0 {
					t.Errorf("second cleanup during the first: %d deleted, %v; want 0, ErrCleanupBusy", second, err)
				}
				if n, err := c.CountExpired(ctx, time.Hour); err != nil || n != 200 {
					t.Errorf("expired claims while the first cleanup pauses: %d, %v; want 200", n, err)
				}
			} else if err != nil {
				t.Errorf("second cleanup: %v", err)
			}
			close(resume)
			r := <-first
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.deleted+second != 300 {
				t.Errorf("deleted %d + %d rows, want 300", r.deleted, second)
			}
			// The lock was released: the next pass runs.
			if n, err := c.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{}); err != nil || n != 0 {
				t.Errorf("cleanup after the first: %d, %v; want 0, nil", n, err)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), 0)
		})
	}
}

// recordingCleaner counts the passes that found the lock taken and keeps other errors.
type recordingCleaner struct {
	sqlinbox.Cleaner
	busy   atomic.Int64
	mu     sync.Mutex
	errors []error
}

func (r *recordingCleaner) Cleanup(ctx context.Context, olderThan time.Duration, config sqlinbox.CleanupConfig) (int64, error) {
	n, err := r.Cleaner.Cleanup(ctx, olderThan, config)
	switch {
	case errors.Is(err, sqlinbox.ErrCleanupBusy):
		r.busy.Add(1)
	case err != nil && ctx.Err() == nil:
		r.mu.Lock()
		r.errors = append(r.errors, err)
		r.mu.Unlock()
	}
	return n, err
}

// Four runners, as four service instances would start, clean one table: no two passes ever
// hold the table at once (checked from inside each pass), and every expired row is deleted
// exactly once.
func TestRetentionRunnersNeverCleanConcurrently(t *testing.T) {
	const rows, runners = 2000, 4
	for _, name := range sortedBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backends[name](t)
			c := b.cleaner(t)
			b.fillClaims(t, "old-", rows, 2*time.Hour)

			var active, maxActive, passes, deleted atomic.Int64
			progress := func(p sqlinbox.CleanupProgress) {
				// Called with the pass's lock held: at its start (Batches 0) and its end.
				if p.Batches == 0 {
					n := active.Add(1)
					for {
						m := maxActive.Load()
						if n <= m || maxActive.CompareAndSwap(m, n) {
							break
						}
					}
					passes.Add(1)
					return
				}
				deleted.Add(p.BatchDeleted)
				if p.Done {
					active.Add(-1)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			recorders := make([]*recordingCleaner, runners)
			for i := range runners {
				recorders[i] = &recordingCleaner{Cleaner: c}
				runner, err := sqlinbox.NewRetentionRunner(recorders[i], sqlinbox.RetentionConfig{
					OlderThan: time.Hour,
					Interval:  time.Millisecond,
					Cleanup:   sqlinbox.CleanupConfig{BatchSize: 50, Pause: time.Millisecond, Progress: progress},
				}, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					if err := runner.Run(ctx); err != nil {
						t.Errorf("Run: %v", err)
					}
				})
			}
			// Poll with a deadline until the table is clean and several passes ran.
			deadline := time.Now().Add(60 * time.Second)
			for {
				n, err := c.CountExpired(context.Background(), time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 && passes.Load() >= 2*runners {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 60 s: %d expired claims left, %d passes", n, passes.Load())
				}
				time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
			}
			// A pass that the stop cancels ends without its Done call, so it would count as
			// holding the table for good, and the pass that takes the lock after it as a second
			// holder: count the passes that held it at once before the runners stop.
			concurrent := maxActive.Load()
			cancel()
			wg.Wait()

			var busy int64
			for _, r := range recorders {
				busy += r.busy.Load()
				for _, err := range r.errors {
					t.Errorf("cleanup error: %v", err)
				}
			}
			if got := deleted.Load(); got != rows {
				t.Errorf("passes deleted %d rows in all, want %d", got, rows)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), 0)
			if lockingBackend(b) && concurrent != 1 {
				t.Errorf("%d cleanup passes held the table at once, want 1", concurrent)
			}
			t.Logf("%d passes, %d skipped as busy, at most %d at once", passes.Load(), busy, concurrent)
		})
	}
}

// A large expired table is cleaned while claims of new messages run: every claim is
// processed exactly once and the cleanup deletes every expired row. pgx/PostgreSQL: 100,000
// rows (1,000,000 with INBOX_TEST_LARGE=1); database/sql PostgreSQL and MariaDB 20,000
// (200,000); SQLite 5,000 (50,000).
func TestRetentionLargeCleanupWhileClaiming(t *testing.T) {
	large := os.Getenv("INBOX_TEST_LARGE") == "1"
	for _, name := range sortedBackends() {
		t.Run(name, func(t *testing.T) {
			rows := 20_000
			switch name {
			case "pgx/postgres":
				rows = 100_000
			case "database-sql/sqlite":
				rows = 5_000 // modernc.org/sqlite under -race deletes ~4,000 rows/s
			}
			if large {
				rows *= 10
			}
			b := backends[name](t)
			c := b.cleaner(t)
			fillStart := time.Now()
			b.fillClaims(t, "old-", rows, 48*time.Hour)
			t.Logf("filled %d expired claims in %s", rows, time.Since(fillStart).Round(time.Millisecond))

			h := b.handler(t, "billing", nil, nil)
			done := make(chan struct{})
			claimed := make(chan struct{}, 1)
			var delivered atomic.Int64
			var nacks atomic.Int64
			var wg sync.WaitGroup
			const workers = 4
			for w := range workers {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-done:
							return
						default:
						}
						key := fmt.Sprintf("new-%d-%d", w, i)
						nacks.Add(int64(len(deliverUntilAcked(t, h, key))))
						delivered.Add(1)
						select {
						case claimed <- struct{}{}:
						default:
						}
					}
				})
			}
			var batches int
			before, start := delivered.Load(), time.Now()
			deleted, err := c.Cleanup(context.Background(), 24*time.Hour, sqlinbox.CleanupConfig{
				BatchSize: 10_000,
				Progress: func(p sqlinbox.CleanupProgress) {
					batches = p.Batches
					if p.Batches != 1 {
						return
					}
					// Make sure claims complete while the pass is under way.
					select {
					case <-claimed:
					default:
					}
					select {
					case <-claimed:
					case <-time.After(30 * time.Second):
						t.Error("no claim completed during the cleanup for 30 s")
					}
				},
			})
			elapsed := time.Since(start)
			during := delivered.Load() - before
			close(done)
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if deleted != int64(rows) {
				t.Errorf("deleted %d rows, want %d", deleted, rows)
			}
			total := int(delivered.Load())
			wantRows(t, "invoices", b.rows(t, b.business, ""), total)
			wantRows(t, "claims left", b.rows(t, b.table, ""), total)
			wantRows(t, "distinct invoices", b.rows(t, "(SELECT DISTINCT msg_key FROM "+b.business+") d", ""), total)
			t.Logf("deleted %d rows in %d batches in %s (%.0f rows/s) while %d messages were claimed (%d during the cleanup, %d nacks redelivered)",
				deleted, batches, elapsed.Round(time.Millisecond), float64(deleted)/elapsed.Seconds(), total, during, nacks.Load())
		})
	}
}

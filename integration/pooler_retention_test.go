package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// poolerCleaners are the two PostgreSQL stores through a pooler, as retention sees them.
var poolerCleaners = []string{"pgx/exec", "database-sql/exec"}

// cleanupLocksHeld counts the granted advisory locks of table's cleanup, on a direct
// connection: the locks the server still holds, whichever server connection holds them.
func cleanupLocksHeld(t *testing.T, b *backend) int {
	t.Helper()
	return b.rows(t, "pg_locks", "WHERE locktype = 'advisory' AND granted AND classid = 2003398242 AND objid = ?::text::regclass::oid", `"`+b.table+`"`)
}

// Passes one after another through the pooler, with claims running meanwhile: none is refused
// as busy (no other cleanup runs), every expired row goes, and no lock is left behind. With
// the session lock, the unlock ran on another server connection than the lock, which stayed
// there, and later passes were refused.
func TestPoolerCleanupPassesAreNeverRefusedAlone(t *testing.T) {
	backends := poolerBackends(testenv.PgBouncerURL(t, poolerServerConns))
	for _, name := range poolerCleaners {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			c := b.cleaner(t)
			stop := claimTraffic(t, b, 8)
			const passes = 30
			for i := range passes {
				b.fillClaims(t, fmt.Sprintf("old-%d-", i), 20, 2*time.Hour)
				n, err := c.Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{BatchSize: 7})
				if err != nil {
					t.Fatalf("pass %d of %d: %v", i+1, passes, err)
				}
				if n != 20 {
					t.Errorf("pass %d deleted %d rows, want 20", i+1, n)
				}
			}
			delivered := stop()
			if held := cleanupLocksHeld(t, b); held != 0 {
				t.Errorf("%d cleanup locks held after the passes, want 0", held)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), delivered)
			wantRows(t, "invoices", b.rows(t, b.business, ""), delivered)
		})
	}
}

// Four runners through the pooler, while claims run through it too: every expired row is
// deleted exactly once, no two passes hold the table at once, no pass fails, and no lock is
// left behind.
func TestPoolerRetentionRunnersWhileClaiming(t *testing.T) {
	backends := poolerBackends(testenv.PgBouncerURL(t, poolerServerConns))
	for _, name := range poolerCleaners {
		t.Run(name, func(t *testing.T) {
			const rows, runners = 3000, 4
			b := backends[name](t)
			c := b.cleaner(t)
			b.fillClaims(t, "old-", rows, 2*time.Hour)
			stop := claimTraffic(t, b, 8)

			var active, maxActive, passes, deleted atomic.Int64
			progress := func(p sqlinbox.CleanupProgress) {
				if p.Batches == 0 {
					n := active.Add(1)
					for m := maxActive.Load(); n > m && !maxActive.CompareAndSwap(m, n); m = maxActive.Load() {
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
					OlderThan: time.Hour, Interval: time.Millisecond,
					Cleanup: sqlinbox.CleanupConfig{BatchSize: 100, Pause: time.Millisecond, Progress: progress},
				}, nil)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					if err := runner.Run(ctx); err != nil {
						t.Errorf("Run: %v", err)
					}
				})
			}
			deadline, cancelDeadline := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancelDeadline()
			if !pollUntil(deadline, func() bool {
				n, err := c.CountExpired(context.Background(), time.Hour)
				return err == nil && n == 0 && passes.Load() >= 2*runners
			}) {
				t.Fatalf("after 90 s: expired claims left or too few passes (%d)", passes.Load())
			}
			// A pass that the stop cancels ends without its Done call, so it would count as
			// holding the table for good, and the pass that takes the lock after it as a second
			// holder: count the passes that held it at once before the runners stop.
			concurrent := maxActive.Load()
			cancel()
			wg.Wait()
			delivered := stop()

			for _, r := range recorders {
				for _, err := range r.errors {
					t.Errorf("cleanup error: %v", err)
				}
			}
			if got := deleted.Load(); got != rows {
				t.Errorf("passes deleted %d rows in all, want %d", got, rows)
			}
			if concurrent != 1 {
				t.Errorf("%d cleanup passes held the table at once, want 1", concurrent)
			}
			if held := cleanupLocksHeld(t, b); held != 0 {
				t.Errorf("%d cleanup locks held after the runners stopped, want 0", held)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), delivered)
			wantRows(t, "invoices", b.rows(t, b.business, ""), delivered)
		})
	}
}

// claimTraffic delivers new messages through b's handler from workers goroutines until the
// returned stop is called; stop returns how many were delivered (each acked once, after
// any retriable nacks, which are checked).
func claimTraffic(t *testing.T, b *backend, workers int) (stop func() int) {
	t.Helper()
	h := b.handler(t, "billing", nil, nil)
	done := make(chan struct{})
	var delivered atomic.Int64
	var mu sync.Mutex
	var nacks []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				errs := deliverUntilAcked(t, h, fmt.Sprintf("new-%d-%d", w, i))
				delivered.Add(1)
				if len(errs) > 0 {
					mu.Lock()
					nacks = append(nacks, errs...)
					mu.Unlock()
				}
			}
		})
	}
	var once sync.Once
	stopWorkers := func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stopWorkers) // also when the test fails before it stops them
	return func() int {
		stopWorkers()
		checkNacksRetriable(t, b, nacks)
		return int(delivered.Load())
	}
}

// cleanerHelperVar carries, to the helper process of TestPoolerKilledCleanerLeavesNoLock,
// the store, the pooler's URL and the table, separated by spaces.
const cleanerHelperVar = "INBOX_TEST_CLEANER_HELPER"

// A cleaner killed in the middle of its pass (SIGKILL, as a crashed or evicted instance)
// leaves no lock: the server drops it once the pooler sees the client gone, and the next
// pass runs. With the session lock the lock stayed on the pooler's server connection for as
// long as the pooler kept it, and every later pass was refused.
func TestPoolerKilledCleanerLeavesNoLock(t *testing.T) {
	poolerURL := testenv.PgBouncerURL(t, poolerServerConns)
	backends := poolerBackends(poolerURL)
	for _, name := range poolerCleaners {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			b.fillClaims(t, "old-", 500, 2*time.Hour)

			holding := make(chan struct{})
			cmd, exited := startHelper(t, "TestPoolerCleanerHelper", cleanerHelperVar+"="+name+" "+poolerURL+" "+b.table, func(line string) {
				if strings.Contains(line, "holding the cleanup lock") {
					close(holding)
				}
			})
			select {
			case <-holding:
			case err := <-exited:
				t.Fatalf("the cleaner exited before its first batch: %v", err)
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("the cleaner did not reach its first batch in 60 s")
			}
			if held := cleanupLocksHeld(t, b); held != 1 {
				t.Errorf("cleanup locks held by the running cleaner: %d, want 1", held)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-exited

			// PgBouncer sees the client gone at once and closes the server connection that was
			// in a transaction; the deadline is for a slow machine.
			deadline, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if !pollUntil(deadline, func() bool { return cleanupLocksHeld(t, b) == 0 }) {
				t.Fatalf("30 s after the kill the cleaner's lock is still held: %d", cleanupLocksHeld(t, b))
			}
			n, err := b.cleaner(t).Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{BatchSize: 100})
			if err != nil {
				t.Fatalf("the pass after the killed one: %v", err)
			}
			if n != 400 { // the killed pass committed its first batch of 100
				t.Errorf("the pass after the killed one deleted %d rows, want 400", n)
			}
		})
	}
}

// TestPoolerCleanerHelper is the cleaner process TestPoolerKilledCleanerLeavesNoLock kills:
// it runs a pass through the pooler and blocks after its first batch, holding the lock.
func TestPoolerCleanerHelper(t *testing.T) {
	spec := os.Getenv(cleanerHelperVar)
	if spec == "" {
		t.Skip("run by TestPoolerKilledCleanerLeavesNoLock")
	}
	fields := strings.Fields(spec)
	if len(fields) != 3 {
		t.Fatalf("%s=%q: want store, URL and table", cleanerHelperVar, spec)
	}
	store, poolerURL, table := fields[0], fields[1], fields[2]
	var cleaner sqlinbox.Cleaner
	var err error
	switch store {
	case "pgx/exec":
		pool := openPgxPool(t, poolerURL, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec })
		cleaner, err = sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
	case "database-sql/exec":
		cleaner, err = sqlinbox.NewDB(openSQL(t, "pgx", withQuery(t, poolerURL, "default_query_exec_mode", "exec")), sqlinbox.Postgres{}, sqlinbox.Config{Table: table})
	default:
		err = errors.New("unknown store " + store)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = cleaner.Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{BatchSize: 100, Progress: func(p sqlinbox.CleanupProgress) {
		if p.Batches == 1 {
			fmt.Println("holding the cleanup lock")
			select {} // until killed
		}
	}})
	t.Fatalf("the pass ended: %v", err)
}

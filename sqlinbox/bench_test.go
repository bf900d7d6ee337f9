package sqlinbox_test

// Benchmarks for issue 2 ("Performance"): what the inbox costs on PostgreSQL, measured as the
// throughput of one business transaction (BEGIN; INSERT one invoice; COMMIT) with and
// without the inbox middleware, at 1, 8 and 32 concurrent workers.
//
// Run them with, for example:
//
//	go test -run '^$' -bench . -benchtime 20000x ./sqlinbox/
//
// (75-95 s on a 2-core machine with PostgreSQL on it; proportionally longer while other
// jobs load it: lower N then, or select one benchmark with -bench 'Pgx').
//
// Without -bench, `go test` never runs a benchmark, so they cost `go test ./...` nothing.
// Without a reachable PostgreSQL they skip (or fail with INBOX_TEST_REQUIRE_SERVICES=1).
//
// # Why the variants are interleaved inside one benchmark
//
// Absolute throughput on a shared machine drifts by more than the inbox costs (see
// /work/shared/FIELD-NOTES.md: about ±0.15 between runs; other jobs compile and test on the
// same two cores). Separate sub-benchmarks run with -count and compared by benchstat do not
// help: `go test` runs all repetitions of one sub-benchmark back to back before the next,
// so a drift between the two stretches of time lands entirely in the ratio. Instead each
// benchmark below splits b.N into many short rounds (benchRoundSize messages, a fraction of
// a second each) and runs every variant once per round, in mirrored order (business, inbox,
// queued, duplicate; then duplicate, queued, inbox, business; ...). The ratio is computed
// per pair of rounds, from the summed times of each variant in the pair: a drift that is
// linear in time cancels out within the pair, and the variants ran within a second of each
// other under the same background load. A burst of load spoils a few pairs, not a whole
// variant, and the median over the pairs ignores them; the quartiles show the spread. One
// benchmark op is one message through each variant, so ns/op is their sum; the figures that
// matter are the custom metrics:
//
//	ratio_med, ratio_q1, ratio_q3    inbox throughput / business-only throughput: median
//	                                 and quartiles over the pairs of rounds
//	dup/first_med                    time of a duplicate / time of a first delivery (median)
//	queued_ratio_med, _q1, _q3       the same ratio for the pgx handler that writes through
//	                                 inbox.Queue, so that its INSERT travels with COMMIT
//	biz_tx/s, inbox_tx/s, ...        throughput of each variant over all its rounds
//	*_allocs/tx                      heap allocations per message in this process
//	*_goroutines/tx                  goroutines started per message (besides the workers),
//	                                 e.g. by a context that database/sql has to watch
//	*_writes/tx                      writes to the server's socket per message: pgx flushes
//	                                 a request with one write, so this counts round trips
//
// Use -benchtime Nx (N messages per variant): a time-based -benchtime works but repeats the
// warm-up for every probe of b.N. -count adds processes' worth of figures for benchstat.

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// benchRoundSize is how many messages of each variant one round runs at the given
// concurrency, at least 16 per worker: the end of a round, when fewer messages than workers
// are left, idles workers for about half a message's latency, which inflates both variants'
// times by about the same fraction (1/32), so it does not bias the ratio. Rounds are short
// (about 0.1 s per variant here) so that a run has many pairs of rounds: 40 at 1 and 8
// workers, 19 at 32 with -benchtime 20000x.
func benchRoundSize(workers int) int { return max(250, 16*workers) }

// benchPayload is what every message carries: the middleware fingerprints it (SHA-256 by
// default) and stores the fingerprint with the claim, so its size is part of the cost.
var benchPayload = message.Payload(`{"customer":"acme","amount_cents":1234,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)

// benchWorkers are the concurrency levels; the pools hold as many connections as the largest.
var benchWorkers = []int{1, 8, 32}

const (
	benchInvoiceDDL = `CREATE TABLE %s (
	id           uuid PRIMARY KEY,
	customer     text NOT NULL,
	amount_cents bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
)`
	benchInvoiceInsert = `INSERT INTO %s (id, customer, amount_cents) VALUES ($1, $2, $3)`
)

// BenchmarkPgxInbox compares the business transaction through a *pgxpool.Pool with the same
// INSERT in a handler wrapped by the inbox middleware over a sqlinbox.PgxStore.
func BenchmarkPgxInbox(b *testing.B) {
	ctx := context.Background()
	writes := new(atomic.Int64)
	config, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	config.MaxConns = int32(slices.Max(benchWorkers))
	config.ConnConfig.DialFunc = benchCountingDialer(writes)
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)

	invoices, inboxTable := benchTables(b, func(ctx context.Context, sql string) error {
		_, err := pool.Exec(ctx, sql)
		return err
	})
	insert := fmt.Sprintf(benchInvoiceInsert, invoices)

	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		b.Fatal(err)
	}

	business := func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, insert, msg.UUID, "acme", int64(1234)); err != nil {
			return nil, err
		}
		return nil, tx.Commit(ctx)
	}
	inInbox := func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
		if !ok {
			return nil, fmt.Errorf("no pgx.Tx in the message context")
		}
		_, err := tx.Exec(msg.Context(), insert, msg.UUID, "acme", int64(1234))
		return nil, err
	}
	// The write-behind path: the INSERT travels with COMMIT, so two round trips in all.
	queued := func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.Queue(msg.Context(), insert, msg.UUID, "acme", int64(1234))
	}
	benchVariants(b, store, business, inInbox, queued, writes)
}

// BenchmarkSQLInbox is BenchmarkPgxInbox through database/sql (pgx's stdlib driver) and a
// sqlinbox.SQLStore, whose BEGIN and claim are two round trips.
func BenchmarkSQLInbox(b *testing.B) {
	ctx := context.Background()
	writes := new(atomic.Int64)
	connConfig, err := pgx.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	connConfig.DialFunc = benchCountingDialer(writes)
	db := stdlib.OpenDB(*connConfig)
	maxConns := slices.Max(benchWorkers)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns) // the default, 2, would reconnect all the time at 8 and 32 workers
	b.Cleanup(func() { db.Close() })

	invoices, inboxTable := benchTables(b, func(ctx context.Context, sql string) error {
		_, err := db.ExecContext(ctx, sql)
		return err
	})
	insert := fmt.Sprintf(benchInvoiceInsert, invoices)

	store, err := sqlinbox.New(db, sqlinbox.Postgres, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		b.Fatal(err)
	}

	business := func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, insert, msg.UUID, "acme", int64(1234)); err != nil {
			return nil, err
		}
		return nil, tx.Commit()
	}
	inInbox := func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
		if !ok {
			return nil, fmt.Errorf("no *sql.Tx in the message context")
		}
		_, err := tx.ExecContext(msg.Context(), insert, msg.UUID, "acme", int64(1234))
		return nil, err
	}
	benchVariants(b, store, business, inInbox, nil, writes)
}

// benchTables creates the invoice table and names the inbox table (the store creates it);
// both are dropped when b ends.
func benchTables(b *testing.B, exec func(context.Context, string) error) (invoices, inboxTable string) {
	b.Helper()
	invoices, inboxTable = testenv.Name("bench_invoice"), testenv.Name("bench_inbox")
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s`, invoices, inboxTable)); err != nil {
			b.Errorf("drop benchmark tables: %v", err)
		}
	})
	if err := exec(context.Background(), fmt.Sprintf(benchInvoiceDDL, invoices)); err != nil {
		b.Fatal(err)
	}
	return invoices, inboxTable
}

// benchVariant is one way of processing a message, run by many workers at once.
type benchVariant struct {
	name    string
	handler message.HandlerFunc
	// key gives the UUID of message i of a round.
	key func(i int) string
	// after checks a round of n messages once it has ended.
	after func(n int) error

	elapsed time.Duration
	msgs    int
	allocs  uint64
	spawned uint64 // goroutines started, besides the workers
	writes  int64
}

// benchVariants wraps inInbox with the inbox middleware over store and runs, at each worker
// count, rounds of these variants: business (the plain business handler, no inbox), inbox
// (first deliveries: fresh UUIDs), queued (first deliveries through inQueued, which writes
// with inbox.Queue; skipped when nil) and dup (the keys the latest inbox round claimed, so
// every message is a duplicate and the handler must not run).
func benchVariants(b *testing.B, store inbox.Store, business, inInbox, inQueued message.HandlerFunc, writes *atomic.Int64) {
	var handlerRuns atomic.Int64
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	counted := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			handlerRuns.Add(1)
			return h(msg)
		}
	}
	wrapped := mw(counted(inInbox))

	// Open and warm every connection (statement caches, catalog caches) before timing.
	benchRound(b, slices.Max(benchWorkers), 4*slices.Max(benchWorkers), func(int) string { return watermill.NewUUID() }, business)
	benchRound(b, slices.Max(benchWorkers), 4*slices.Max(benchWorkers), func(int) string { return watermill.NewUUID() }, wrapped)

	for _, workers := range benchWorkers {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var (
				claimed  []string // claimed[:nClaimed] are the keys of the latest inbox round
				nClaimed int
			)
			fresh := func(int) string { return watermill.NewUUID() }
			biz := &benchVariant{name: "biz", handler: business, key: fresh}
			first := &benchVariant{name: "inbox", handler: wrapped,
				key: func(i int) string {
					k := watermill.NewUUID()
					claimed[i] = k
					return k
				},
				after: func(n int) error {
					if runs := handlerRuns.Swap(0); runs != int64(n) {
						return fmt.Errorf("handler ran %d times for %d first deliveries", runs, n)
					}
					nClaimed = n
					return nil
				},
			}
			var queued *benchVariant
			if inQueued != nil {
				queued = &benchVariant{name: "queued", handler: mw(counted(inQueued)), key: fresh,
					after: func(n int) error {
						if runs := handlerRuns.Swap(0); runs != int64(n) {
							return fmt.Errorf("handler ran %d times for %d first deliveries", runs, n)
						}
						return nil
					},
				}
			}
			dup := &benchVariant{name: "dup", handler: wrapped,
				key: func(i int) string { return claimed[i%nClaimed] },
				after: func(int) error {
					if runs := handlerRuns.Swap(0); runs != 0 {
						return fmt.Errorf("handler ran %d times for duplicates", runs)
					}
					return nil
				},
			}

			rounds := b.N / benchRoundSize(workers)
			rounds -= rounds % 2 // whole pairs
			if rounds < 2 {
				rounds = min(2, b.N)
			}
			warm := 4 * workers
			claimed = make([]string, max(warm, b.N/rounds+1))
			// Warm up this concurrency level; this also claims the keys the first dup round needs.
			handlerRuns.Store(0)
			all := []*benchVariant{biz, first, dup} // in the order of even rounds
			if queued != nil {
				all = []*benchVariant{biz, first, queued, dup}
			}
			for _, v := range all {
				benchRound(b, workers, warm, v.key, v.handler)
				if v.after != nil {
					if err := v.after(warm); err != nil {
						b.Fatal(err)
					}
				}
			}
			for _, v := range all {
				v.reset()
			}

			var ratios, queuedRatios, dupCosts []float64
			times := map[*benchVariant]time.Duration{} // of the current pair of rounds
			b.ResetTimer()
			for r := range rounds {
				n := (r+1)*b.N/rounds - r*b.N/rounds
				order := slices.Clone(all)
				if r%2 == 1 {
					slices.Reverse(order) // mirrored: linear drift cancels per pair
				}
				for _, v := range order {
					times[v] += v.run(b, workers, n, writes)
				}
				if r%2 == 1 || r == rounds-1 {
					// Rounds of a pair differ in size by one message at most.
					ratios = append(ratios, float64(times[biz])/float64(times[first]))
					if queued != nil {
						queuedRatios = append(queuedRatios, float64(times[biz])/float64(times[queued]))
					}
					dupCosts = append(dupCosts, float64(times[dup])/float64(times[first]))
					clear(times)
				}
			}
			b.StopTimer()

			slices.Sort(ratios)
			slices.Sort(dupCosts)
			b.ReportMetric(benchQuantile(ratios, 0.5), "ratio_med")
			b.ReportMetric(benchQuantile(ratios, 0.25), "ratio_q1")
			b.ReportMetric(benchQuantile(ratios, 0.75), "ratio_q3")
			b.ReportMetric(benchQuantile(dupCosts, 0.5), "dup/first_med")
			if queued != nil {
				slices.Sort(queuedRatios)
				b.ReportMetric(benchQuantile(queuedRatios, 0.5), "queued_ratio_med")
				b.ReportMetric(benchQuantile(queuedRatios, 0.25), "queued_ratio_q1")
				b.ReportMetric(benchQuantile(queuedRatios, 0.75), "queued_ratio_q3")
			}
			for _, v := range all {
				v.report(b)
			}
			if len(ratios) >= 6 {
				lo, hi := benchMedianCI(ratios)
				b.Logf("%d pairs of rounds of %d msgs: inbox/business throughput median %.3f (95%% CI [%.3f, %.3f]), quartiles [%.3f, %.3f], range [%.3f, %.3f]; duplicate/first delivery time median %.3f, quartiles [%.3f, %.3f]",
					len(ratios), b.N/rounds, benchQuantile(ratios, 0.5), lo, hi,
					benchQuantile(ratios, 0.25), benchQuantile(ratios, 0.75), ratios[0], ratios[len(ratios)-1],
					benchQuantile(dupCosts, 0.5), benchQuantile(dupCosts, 0.25), benchQuantile(dupCosts, 0.75))
				if queued != nil {
					lo, hi := benchMedianCI(queuedRatios)
					b.Logf("with inbox.Queue (write-behind): queued/business throughput median %.3f (95%% CI [%.3f, %.3f]), quartiles [%.3f, %.3f]",
						benchQuantile(queuedRatios, 0.5), lo, hi, benchQuantile(queuedRatios, 0.25), benchQuantile(queuedRatios, 0.75))
				}
			}
		})
	}
}

func (v *benchVariant) reset() {
	v.elapsed, v.msgs, v.allocs, v.spawned, v.writes = 0, 0, 0, 0, 0
}

// run runs one round of n messages and returns how long it took.
func (v *benchVariant) run(b *testing.B, workers, n int, writes *atomic.Int64) time.Duration {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := benchGoroutinesCreated()
	w0 := writes.Load()
	elapsed := benchRound(b, workers, n, v.key, v.handler)
	w1 := writes.Load()
	g1 := benchGoroutinesCreated()
	runtime.ReadMemStats(&after)
	if v.after != nil {
		if err := v.after(n); err != nil {
			b.Fatal(err)
		}
	}
	v.elapsed += elapsed
	v.msgs += n
	v.allocs += after.Mallocs - before.Mallocs
	v.spawned += g1 - g0 - uint64(workers)
	v.writes += w1 - w0
	return elapsed
}

func (v *benchVariant) report(b *testing.B) {
	if v.msgs == 0 {
		return
	}
	b.ReportMetric(float64(v.msgs)/v.elapsed.Seconds(), v.name+"_tx/s")
	b.ReportMetric(float64(v.allocs)/float64(v.msgs), v.name+"_allocs/tx")
	if benchGoroutinesCreated() != 0 {
		b.ReportMetric(float64(v.spawned)/float64(v.msgs), v.name+"_goroutines/tx")
	}
	b.ReportMetric(float64(v.writes)/float64(v.msgs), v.name+"_writes/tx")
}

// benchGoroutinesCreated returns how many goroutines the process has started, or 0 before
// Go 1.26, whose runtime/metrics do not count them.
func benchGoroutinesCreated() uint64 {
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// benchRound has workers goroutines process messages 0..n-1 with handler, each message built
// with key(i) as its UUID, and returns the wall time from start to the last message done.
func benchRound(b *testing.B, workers, n int, key func(int) string, handler message.HandlerFunc) time.Duration {
	b.Helper()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				// A subscriber gives each message a context it cancels once the message is
				// acked or nacked (gochannel: context.WithCancel of its own).
				ctx, cancel := context.WithCancel(context.Background())
				_, err := handler(message.NewMessageWithContext(ctx, key(i), benchPayload))
				cancel()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return elapsed
}

// benchQuantile returns the q-quantile of sorted, interpolating between neighbours.
func benchQuantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (pos-float64(i))*(sorted[i+1]-sorted[i])
}

// benchMedianCI returns a distribution-free confidence interval of about 95% for the median
// of sorted: the order statistics n/2 ± 0.98·√n (normal approximation to the binomial).
func benchMedianCI(sorted []float64) (lo, hi float64) {
	n := len(sorted)
	k := max(0, int(math.Floor(float64(n)/2-0.98*math.Sqrt(float64(n)))))
	return sorted[k], sorted[n-1-k]
}

// benchCountingDialer dials TCP and counts every write to the server: pgx buffers a request
// and flushes it with one write, so writes per message count the round trips it took.
func benchCountingDialer(writes *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &benchCountingConn{Conn: conn, writes: writes}, nil
	}
}

type benchCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *benchCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

package integration

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The store made by sqlinbox.NewMultiStatementCoalesced: write-behind requests of concurrent
// messages in one multi-statement request on MariaDB, each message its own transaction.

// coalescedStores makes stores with sqlinbox.NewMultiStatementCoalesced, each on a pool of its
// own to dsn, closed when the test ends.
func coalescedStores(pipeline sqlinbox.PipelineConfig) func(t *testing.T, dsn string) storeMaker {
	return func(t *testing.T, dsn string) storeMaker {
		connector := mysqlConnector(t, mysqlMultiStatementsDSNOf(t, dsn))
		return func(config sqlinbox.Config) (inbox.Store, error) {
			store, db, err := sqlinbox.NewMultiStatementCoalesced(connector, sqlinbox.MySQL{}, config, pipeline)
			if err != nil {
				return nil, err
			}
			db.SetMaxOpenConns(16)
			t.Cleanup(func() { db.Close() })
			return store, nil
		}
	}
}

// The conformance suite on the coalesced store: in write-behind mode, its own path, with the
// default connections and with one (every message that finds it busy waits for the next
// request, so the suite's concurrent cases send requests of many messages); and in the
// claim-first modes, which run as on NewMultiStatement.
func TestStoreConformanceCoalesced(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		pipeline sqlinbox.PipelineConfig
		options  inboxtest.Options
	}{
		{"write-behind", sqlinbox.PipelineConfig{}, inboxtest.Options{Config: inbox.Config{WriteBehind: true}}},
		{"write-behind/one-connection", sqlinbox.PipelineConfig{Connections: 1}, inboxtest.Options{Config: inbox.Config{WriteBehind: true}}},
		{"claim-first", sqlinbox.PipelineConfig{}, inboxtest.Options{}},
		{"claim-first/queued", sqlinbox.PipelineConfig{}, inboxtest.Options{ExecAtCommit: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness {
				return mysqlBackendOf(t, "", coalescedStores(c.pipeline)).harness()
			}, &c.options)
		})
	}
}

// coalescedFixture is a coalesced store with one connection, its inbox table and a business
// table of two rows per message: an invoice and a ledger line, whose amount may not be NULL.
type coalescedFixture struct {
	direct          *sql.DB
	store           *sqlinbox.Store
	table, business string
	// reader reads the store's inbox.pipeline.messages histogram: the messages of each
	// multi-statement request.
	reader *sdkmetric.ManualReader
}

func newCoalescedFixture(t *testing.T, pipeline sqlinbox.PipelineConfig) *coalescedFixture {
	t.Helper()
	ctx := context.Background()
	f := &coalescedFixture{direct: openSQL(t, "mysql", testenv.MySQLDSN(t)), table: testenv.Name("co_inbox"), business: testenv.Name("co_lines"),
		reader: sdkmetric.NewManualReader()}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	pipeline.MeterProvider = provider
	t.Cleanup(func() { _, _ = f.direct.Exec("DROP TABLE IF EXISTS " + f.table + ", " + f.business) })
	if _, err := f.direct.Exec("CREATE TABLE " + f.business + " (msg_key varchar(64) NOT NULL, kind varchar(16) NOT NULL, cents bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	store, db, err := sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, mysqlMultiStatementsDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Table: f.table}, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	f.store = store
	return f
}

// handler is the write-behind handler of consumer billing: it queues an invoice and a ledger
// line per message; a payload "null" makes the second statement fail.
func (f *coalescedFixture) handler(t *testing.T) message.HandlerFunc {
	mw, err := inbox.NewMiddleware(f.store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + f.business + " (msg_key, kind, cents) VALUES (?, ?, ?)"
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		var cents any = 100
		if string(msg.Payload) == "null" {
			cents = nil
		}
		return nil, errors.Join(inbox.ExecAtCommit(msg.Context(), insert, msg.UUID, "invoice", 100),
			inbox.ExecAtCommit(msg.Context(), insert, msg.UUID, "ledger", cents))
	})
}

// requests returns the histogram of the messages per request so far: how many requests, how
// many messages in all, and the fewest and the most in one.
func (f *coalescedFixture) requests(t *testing.T) (requests uint64, messages, fewest, most int64) {
	t.Helper()
	var data metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &data); err != nil {
		t.Fatal(err)
	}
	for _, scope := range data.ScopeMetrics {
		for _, m := range scope.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == inboxotel.MetricPipelineMessages {
				for _, p := range h.DataPoints {
					requests, messages = requests+p.Count, messages+p.Sum
					fewest, _ = p.Min.Value()
					most, _ = p.Max.Value()
				}
			}
		}
	}
	return requests, messages, fewest, most
}

// waitingInCombiner counts the deliveries parked in the store's combiner, waiting for a
// connection's next request: goroutines inside its do and not sending (lane). The store shows
// its queue to nothing outside its package, and the goroutines' stacks are what the runtime
// shows of it.
func waitingInCombiner(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	waiting, seen := 0, false
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sqlinbox.(*combiner[...]).do(") {
			seen = true
			if !strings.Contains(g, "sqlinbox.(*combiner[...]).lane(") {
				waiting++
			}
		}
	}
	if !seen {
		t.Log("no goroutine in sqlinbox.(*combiner[...]).do: if it was renamed, rename it here")
	}
	return waiting
}

func (f *coalescedFixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.direct.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdKey inserts key's claim in a transaction it keeps open until release: a claim of key
// waits for it, and so does the request that carries that claim.
func (f *coalescedFixture) holdKey(t *testing.T, key string) (release func()) {
	t.Helper()
	tx, err := f.direct.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO "+f.table+" (consumer, message_id) VALUES ('billing', ?)", key); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

func deliverMessage(h message.HandlerFunc, key, payload string) error {
	msg := message.NewMessage(key, message.Payload(payload))
	msg.SetContext(context.Background())
	_, err := h(msg)
	return err
}

// One request carries 16 messages: 7 healthy, one whose second statement fails, a copy of an
// earlier message of the same request, 7 healthy. The server stops at the failing statement:
// the 7 before it commit and are acked, the failing one is nacked alone, and the rest go again
// in a later request, where the copy's claim meets its committed first copy (acked without
// effect) and the 7 after it go once more, in a third, and commit. Rows are counted from
// another session.
func TestCoalescedRequestSettlesEachMessage(t *testing.T) {
	f := newCoalescedFixture(t, sqlinbox.PipelineConfig{Connections: 1, Messages: 16})
	h := f.handler(t)

	// The one connection is busy with a blocker whose claim waits for a lock of the test's,
	// until the other 16 wait for the next request.
	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliverMessage(h, "blocker", "x") }()
	waitFor(t, "the blocker's request", func() bool { n, _, _, _ := f.requests(t); return n == 1 })

	var keys, payloads []string
	for i := range 7 {
		keys, payloads = append(keys, "early-"+strconv.Itoa(i)), append(payloads, "cents")
	}
	keys, payloads = append(keys, "failing", "early-2"), append(payloads, "null", "cents")
	for i := range 7 {
		keys, payloads = append(keys, "late-"+strconv.Itoa(i)), append(payloads, "cents")
	}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { errs[i] = deliverMessage(h, keys[i], payloads[i]) })
		waitFor(t, "message "+keys[i]+" waiting", func() bool { return waitingInCombiner(t) == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker, whose key the test released by rolling back: %v", err)
	}
	wg.Wait()

	// The blocker; the 16, stopped at the failing one; the copy and the 7 after it, stopped at
	// the copy; the 7.
	if requests, messages, fewest, most := f.requests(t); requests != 4 || messages != 1+16+8+7 || fewest != 1 || most != 16 {
		t.Errorf("%d requests of %d messages in all, %d to %d each; want 4 requests of 1, 16, 8 and 7 messages", requests, messages, fewest, most)
	}
	var acks, nacks int
	for i, err := range errs {
		switch {
		case err == nil:
			acks++
		case keys[i] != "failing":
			t.Errorf("%s (message %d) nacked: %v", keys[i], i, err)
		default:
			nacks++
			if f.store.IsTransient(err) || !strings.Contains(err.Error(), "1048") {
				t.Errorf("the failing message's error is its own NOT NULL violation (1048), not the database's: %v", err)
			}
		}
	}
	if acks != 15 || nacks != 1 {
		t.Errorf("%d acks and %d nacks, want 15 and 1", acks, nacks)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM "+f.business+" WHERE msg_key <> 'blocker'"); n != 28 {
		t.Errorf("%d business rows, want 28: two for each of the 14 healthy messages", n)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM "+f.business+" WHERE msg_key = 'failing'"); n != 0 {
		t.Errorf("%d rows of the failing message, want 0: its first statement was rolled back with it", n)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM "+f.business+" WHERE msg_key = 'early-2'"); n != 2 {
		t.Errorf("%d rows of early-2, want 2: its copy is a duplicate", n)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM "+f.table+" WHERE message_id <> 'blocker'"); n != 14 {
		t.Errorf("%d claims, want 14 (none for the failing message)", n)
	}
}

// A lone delivery finds the connection free and goes at once, alone.
func TestCoalescedLoneDeliveryGoesAlone(t *testing.T) {
	f := newCoalescedFixture(t, sqlinbox.PipelineConfig{Connections: 1})
	h := f.handler(t)
	for i := range 3 {
		if err := deliverMessage(h, "order-"+strconv.Itoa(i), "cents"); err != nil {
			t.Fatal(err)
		}
	}
	if requests, messages, _, most := f.requests(t); requests != 3 || messages != 3 || most != 1 {
		t.Errorf("%d requests of %d messages, at most %d in one; want 3 of one each", requests, messages, most)
	}
	if n := f.count(t, "SELECT COUNT(*) FROM "+f.business); n != 6 {
		t.Errorf("%d business rows, want 6", n)
	}
}

package sqlinbox_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/pgtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// pipelineFixture is a store made by NewPgxPipeline on its own pool and tables: an inbox, and
// a business table of one row per message whose amount may not be NULL.
type pipelineFixture struct {
	pool            *pgxpool.Pool
	store           *sqlinbox.Store
	table, business string

	mu     sync.Mutex
	rounds []int // requests per pipeline, in the order sent
}

func newPipelineFixture(t *testing.T, config sqlinbox.Config, pipeline sqlinbox.PipelineConfig) *pipelineFixture {
	return newPipelineFixtureIn(t, pgx.QueryExecModeCacheStatement, config, pipeline)
}

// newPipelineFixtureIn is newPipelineFixture with the pool's DefaultQueryExecMode mode.
func newPipelineFixtureIn(t *testing.T, mode pgx.QueryExecMode, config sqlinbox.Config, pipeline sqlinbox.PipelineConfig) *pipelineFixture {
	t.Helper()
	ctx := context.Background()
	poolConfig, err := pgxpool.ParseConfig(pgtest.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	poolConfig.MaxConns = 8
	poolConfig.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := &pipelineFixture{pool: pool, table: pgtest.Name("pipe_inbox"), business: pgtest.Name("pipe_invoices")}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+f.table+", "+f.business)
	})
	if _, err := pool.Exec(ctx, "CREATE TABLE "+f.business+" (msg_key text NOT NULL, cents bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	config.Table = f.table
	if f.store, err = sqlinbox.NewPgxPipeline(pool, config, pipeline); err != nil {
		t.Fatal(err)
	}
	if err := f.store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	sqlinbox.ObservePipelines(f.store, func(n int) {
		f.mu.Lock()
		f.rounds = append(f.rounds, n)
		f.mu.Unlock()
	})
	return f
}

// handler is the write-behind handler of consumer billing: it queues one invoice row per
// message, whose amount is the message's payload ("null" makes the statement fail).
func (f *pipelineFixture) handler(t *testing.T) message.HandlerFunc {
	mw, err := inbox.NewMiddleware(f.store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + f.business + " (msg_key, cents) VALUES ($1, $2)"
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		var cents any
		if s := string(msg.Payload); s != "null" {
			cents = len(s)
		}
		return nil, inbox.ExecAtCommit(msg.Context(), insert, msg.UUID, cents)
	})
}

func deliver(h message.HandlerFunc, key, payload string) error {
	msg := message.NewMessage(key, message.Payload(payload))
	msg.SetContext(context.Background())
	_, err := h(msg)
	return err
}

func (f *pipelineFixture) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *pipelineFixture) pipelines() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rounds)
}

// holdKey inserts key's claim in a transaction it keeps open until release: a claim of key
// waits for it, and so does the pipeline that carries that claim.
func (f *pipelineFixture) holdKey(t *testing.T, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+f.table+" (consumer, message_id) VALUES ('billing', $1)", key); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }) }
	t.Cleanup(release)
	return release
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// deliverAll delivers every key with its payload at once and returns each one's error.
func deliverAll(h message.HandlerFunc, keys, payloads []string) []error {
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { errs[i] = deliver(h, keys[i], payloads[i]) })
	}
	wg.Wait()
	return errs
}

// One pipeline of 16 messages: a message whose queued statement fails, the second copy of a
// message whose first copy is earlier in the same pipeline, and 14 healthy messages (that
// first copy among them). One nack, one ack without effect, 14 commits: each message is its
// own transaction.
func TestPipelineFailingMessageAndDuplicateAmongHealthyOnes(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1, Messages: 16})
	h := f.handler(t)

	// The one connection is busy with a blocker whose claim waits for a lock of the test's,
	// until the other 16 wait for the next pipeline.
	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliver(h, "blocker", "x") }()
	waitFor(t, "the blocker's pipeline", func() bool { return len(f.pipelines()) == 1 })

	var keys, payloads []string
	for i := range 14 {
		keys, payloads = append(keys, "healthy-"+strconv.Itoa(i)), append(payloads, "cents")
	}
	keys, payloads = append(keys, "failing"), append(payloads, "null")
	keys, payloads = append(keys, "healthy-3"), append(payloads, "cents")
	results := make(chan []error, 1)
	// In order, so that the duplicate waits behind its first copy.
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { errs[i] = deliver(h, keys[i], payloads[i]) })
		waitFor(t, "message "+keys[i]+" waiting", func() bool { return sqlinbox.PipelineWaiting(f.store) == i+1 })
	}
	go func() { wg.Wait(); results <- errs }()
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker, whose key the test released by rolling back: %v", err)
	}
	errs = <-results

	if got, want := f.pipelines(), []int{1, 16, 1}; !slices.Equal(got, want) {
		t.Errorf("requests per pipeline: %v, want %v (the blocker, the 16 messages, the duplicate's read)", got, want)
	}
	var acks, nacks int
	for i, err := range errs {
		switch {
		case err == nil:
			acks++
		case keys[i] != "failing":
			t.Errorf("%s nacked: %v", keys[i], err)
		default:
			nacks++
			if f.store.IsTransient(err) {
				t.Errorf("the failing message's error is the message's, not the database's: %v", err)
			}
		}
	}
	if acks != 15 || nacks != 1 {
		t.Errorf("%d acks and %d nacks, want 15 and 1", acks, nacks)
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.business+" WHERE msg_key <> 'blocker'"); n != 14 {
		t.Errorf("%d invoices, want 14", n)
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.business+" WHERE msg_key = 'healthy-3'"); n != 1 {
		t.Errorf("%d invoices of healthy-3, want 1: its second copy is a duplicate", n)
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.table+" WHERE message_id <> 'blocker'"); n != 14 {
		t.Errorf("%d claims, want 14 (none for the failing message)", n)
	}
}

// A lone delivery finds the connection free and goes at once, in a pipeline of its own.
func TestPipelineLoneDeliveryGoesAlone(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1})
	h := f.handler(t)
	for i := range 3 {
		if err := deliver(h, "order-"+strconv.Itoa(i), "cents"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.pipelines(); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("requests per pipeline: %v, want [1 1 1]", got)
	}
}

// The server ends the pipeline's backend while a message in the middle waits for a lock: the
// message before it is committed and acked, it and every message after it are nacked with an
// error IsTransient reports; their redeliveries commit each once.
func TestPipelineConnectionLostNacksEveryMessageWithoutResult(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1, Messages: 8})
	h := f.handler(t)
	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliver(h, "blocker", "x") }()
	waitFor(t, "the blocker's pipeline", func() bool { return len(f.pipelines()) == 1 })

	keys := []string{"first", "waits", "after-1", "after-2", "after-3"}
	hold := f.holdKey(t, "waits")
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { errs[i] = deliver(h, keys[i], "cents") })
		waitFor(t, keys[i]+" waiting", func() bool { return sqlinbox.PipelineWaiting(f.store) == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker: %v", err)
	}
	// The pipeline's backend waits for the lock on "waits": end it.
	var pid int
	waitFor(t, "the claim of waits to wait for its lock", func() bool {
		err := f.pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "`+f.table+`"%'`).Scan(&pid)
		return err == nil
	})
	if _, err := f.pool.Exec(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pid); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	hold()

	if errs[0] != nil {
		t.Errorf("first, committed before the connection broke, was nacked: %v", errs[0])
	}
	for i, err := range errs[1:] {
		if err == nil {
			t.Errorf("%s acked, though its result cannot have arrived", keys[i+1])
		} else if !f.store.IsTransient(err) {
			t.Errorf("%s: IsTransient is false for %v", keys[i+1], err)
		}
	}
	for _, key := range keys[1:] {
		if err := deliver(h, key, "cents"); err != nil {
			t.Errorf("redelivery of %s: %v", key, err)
		}
	}
	if err := deliver(h, "first", "cents"); err != nil {
		t.Errorf("redelivery of first: %v", err)
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.business+" WHERE msg_key <> 'blocker'"); n != len(keys) {
		t.Errorf("%d invoices, want %d", n, len(keys))
	}
	if n := f.count(t, "SELECT count(*) FROM (SELECT msg_key FROM "+f.business+" GROUP BY msg_key HAVING count(*) > 1) d"); n != 0 {
		t.Errorf("%d messages invoiced twice", n)
	}
}

// A claim that waits longer than Config.LockTimeout fails that message alone; the messages
// after it in the pipeline commit.
func TestPipelineLockTimeoutFailsOnlyItsMessage(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{LockTimeout: 200 * time.Millisecond}, sqlinbox.PipelineConfig{Connections: 1})
	h := f.handler(t)
	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliver(h, "blocker", "x") }()
	waitFor(t, "the blocker's pipeline", func() bool { return len(f.pipelines()) == 1 })
	keys := []string{"before", "held", "after"}
	hold := f.holdKey(t, "held")
	defer hold()
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { errs[i] = deliver(h, keys[i], "cents") })
		waitFor(t, keys[i]+" waiting", func() bool { return sqlinbox.PipelineWaiting(f.store) == i+1 })
	}
	err := <-blocked
	if err == nil || !f.store.IsTransient(err) {
		t.Errorf("the blocker, held past the lock timeout: %v, want a transient error", err)
	}
	release()
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("before: %v, after: %v; want both acked", errs[0], errs[2])
	}
	if errs[1] == nil || !f.store.IsTransient(errs[1]) {
		t.Errorf("held: %v, want a transient lock timeout", errs[1])
	}
}

// Arguments are encoded as pgx encodes them, by the connection's type map, in every mode; one
// it cannot encode fails its message before anything is sent, and the others of the pipeline
// commit.
func TestPipelineEncodesWhatHandlersPass(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { testPipelineEncodes(t, mode) })
	}
}

func testPipelineEncodes(t *testing.T, mode pgx.QueryExecMode) {
	f := newPipelineFixtureIn(t, mode, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1})
	ctx := context.Background()
	typed := pgtest.Name("pipe_types")
	t.Cleanup(func() { _, _ = f.pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+typed) })
	if _, err := f.pool.Exec(ctx, "CREATE TABLE "+typed+` (k text PRIMARY KEY, n int, big bigint, b bytea,
		at timestamptz, v text, maybe text, named text)`); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	mw, err := inbox.NewMiddleware(f.store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if string(msg.Payload) == "unencodable" {
			return nil, inbox.ExecAtCommit(ctx, "INSERT INTO "+typed+" (k, n) VALUES ($1, $2)", msg.UUID, make(chan int))
		}
		if err := inbox.ExecAtCommit(ctx, "INSERT INTO "+typed+" (k, n, big, b, at, v, maybe) VALUES ($1, $2, $3, $4, $5, $6, $7)",
			msg.UUID, 7, int64(1)<<40, []byte{0, 1, 0xff}, at, valuer("from a Valuer"), nil); err != nil {
			return nil, err
		}
		return nil, inbox.ExecAtCommit(ctx, "UPDATE "+typed+" SET named = @named WHERE k = @k", pgx.NamedArgs{"named": "by name", "k": msg.UUID})
	})
	errs := deliverAll(h, []string{"typed", "bad"}, []string{"typed", "unencodable"})
	if errs[0] != nil {
		t.Fatalf("typed arguments: %v", errs[0])
	}
	if errs[1] == nil {
		t.Fatal("an argument pgx cannot encode was acked")
	}
	if f.store.IsTransient(errs[1]) {
		t.Errorf("an argument pgx cannot encode is the message's fault, not the database's: %v", errs[1])
	}
	t.Logf("the refusal: %v", errs[1])
	var n, big int64
	var b []byte
	var gotAt time.Time
	var v, named string
	var maybe *string
	if err := f.pool.QueryRow(ctx, "SELECT n, big, b, at, v, maybe, named FROM "+typed+" WHERE k = 'typed'").
		Scan(&n, &big, &b, &gotAt, &v, &maybe, &named); err != nil {
		t.Fatal(err)
	}
	if n != 7 || big != 1<<40 || string(b) != "\x00\x01\xff" || !gotAt.Equal(at) || v != "from a Valuer" || maybe != nil || named != "by name" {
		t.Errorf("stored %d %d %x %s %q %v %q", n, big, b, gotAt, v, maybe, named)
	}
	if c := f.count(t, "SELECT count(*) FROM "+f.table+" WHERE message_id = 'bad'"); c != 0 {
		t.Errorf("the message whose argument could not be encoded left %d claims", c)
	}
	// A duplicate reads its committed claim in this mode too.
	if err := deliver(h, "typed", "typed"); err != nil {
		t.Errorf("a duplicate: %v", err)
	}
}

type valuer string

func (v valuer) Value() (driver.Value, error) { return string(v), nil }

// queueInOrder delivers each key with its payload, in order, each one queued for the next
// pipeline before the next one is delivered (the one connection busy with a held blocker),
// and returns their errors once the blocker is released and they are all done.
func (f *pipelineFixture) queueInOrder(t *testing.T, h message.HandlerFunc, keys, payloads []string) []error {
	t.Helper()
	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliver(h, "blocker", "x") }()
	waitFor(t, "the blocker's pipeline", func() bool { return len(f.pipelines()) == 1 })
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { errs[i] = deliver(h, keys[i], payloads[i]) })
		waitFor(t, keys[i]+" waiting", func() bool { return sqlinbox.PipelineWaiting(f.store) == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker, whose key the test released by rolling back: %v", err)
	}
	wg.Wait()
	if got, want := f.pipelines(), []int{1, len(keys)}; !slices.Equal(got, want) {
		t.Fatalf("requests per pipeline: %v, want %v", got, want)
	}
	return errs
}

// A message with an argument pgx cannot encode, first in a pipeline of healthy messages and
// of messages that fail on their own (a unique violation), each with an outcome of its own:
// the unencodable one is nacked with the encoder's error and no claim, every other message
// gets its own result, the healthy ones committed with their own rows, the failing ones
// nacked with the violation of their own key. Results handed to the wrong message fail it at
// once, whatever the timing.
func TestPipelineUnencodableAheadOfHealthyOnes(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1, Messages: 16})
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, "ALTER TABLE "+f.business+" ADD UNIQUE (msg_key)"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO "+f.business+" (msg_key, cents) VALUES ('taken-2', 0), ('taken-5', 0)"); err != nil {
		t.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(f.store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + f.business + " (msg_key, cents) VALUES ($1, $2)"
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		if string(msg.Payload) == "unencodable" {
			return nil, inbox.ExecAtCommit(msg.Context(), insert, msg.UUID, make(chan int))
		}
		return nil, inbox.ExecAtCommit(msg.Context(), insert, msg.UUID, len(msg.Payload))
	})
	keys := []string{"bad", "ok-1", "taken-2", "ok-3", "ok-4", "taken-5", "ok-6"}
	payloads := []string{"unencodable", "a", "bb", "ccc", "dddd", "eeeee", "ffffff"}
	errs := f.queueInOrder(t, h, keys, payloads)

	for i, key := range keys {
		err := errs[i]
		var pgErr *pgconn.PgError
		switch {
		case key == "bad" && (err == nil || !strings.Contains(err.Error(), "encode the arguments")):
			t.Errorf("bad: %v, want the encoder's refusal", err)
		case strings.HasPrefix(key, "taken-") && (!errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(pgErr.Detail, "("+key+")")):
			t.Errorf("%s: %v, want the unique violation of its own key", key, err)
		case strings.HasPrefix(key, "ok-") && err != nil:
			t.Errorf("%s: %v, want it committed", key, err)
		}
		if err != nil && f.store.IsTransient(err) {
			t.Errorf("%s: %v is the message's, not the database's", key, err)
		}
		claims := f.count(t, "SELECT count(*) FROM "+f.table+" WHERE message_id = $1", key)
		switch {
		case strings.HasPrefix(key, "ok-"):
			cents := f.count(t, "SELECT coalesce(sum(cents), -1) FROM "+f.business+" WHERE msg_key = $1", key)
			if claims != 1 || cents != len(payloads[i]) {
				t.Errorf("%s: %d claims and a row of %d cents, want 1 and its own %d", key, claims, cents, len(payloads[i]))
			}
		case claims != 0:
			t.Errorf("%s: %d claims, want none", key, claims)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.business+" WHERE msg_key = 'bad'"); n != 0 {
		t.Errorf("%d rows of the unencodable message", n)
	}
}

// A message whose transaction fails at its Sync, the implicit transaction's COMMIT (a
// deferred unique constraint, checked there), in the middle of a pipeline: it alone is nacked,
// with the violation, as the message's failure at COMMIT, and no claim; the messages before
// and after it commit.
func TestPipelineFailureAtSyncFailsOnlyItsMessage(t *testing.T) {
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1, Messages: 16})
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, "ALTER TABLE "+f.business+" ADD UNIQUE (msg_key) DEFERRABLE INITIALLY DEFERRED"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, "INSERT INTO "+f.business+" (msg_key, cents) VALUES ('taken', 0)"); err != nil {
		t.Fatal(err)
	}
	keys := []string{"before", "taken", "after"}
	errs := f.queueInOrder(t, f.handler(t), keys, []string{"a", "bb", "ccc"})
	var pgErr *pgconn.PgError
	if err := errs[1]; !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(err.Error(), "sqlinbox: commit: ") {
		t.Errorf("taken: %v, want the deferred unique violation at its commit", err)
	} else if f.store.IsTransient(err) {
		t.Errorf("taken: %v is the message's, not the database's", err)
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("before: %v, after: %v; want both committed", errs[0], errs[2])
	}
	for key, want := range map[string]int{"before": 1, "taken": 0, "after": 1} {
		if n := f.count(t, "SELECT count(*) FROM "+f.table+" WHERE message_id = $1", key); n != want {
			t.Errorf("%s: %d claims, want %d", key, n, want)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM "+f.business+" WHERE msg_key <> 'blocker'"); n != 3 {
		t.Errorf("%d rows, want 3 (the one taken held already and the two committed messages')", n)
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The store conformance suite: every case runs against every backend, on a fresh inbox
// table and business table.
var storeCases = []struct {
	name string
	run  func(t *testing.T, b *backend)
}{
	{"first delivery commits claim and business row together", testFirstDelivery},
	{"sequential duplicate is skipped and not an error", testSequentialDuplicate},
	{"concurrent copies of one message", testConcurrentCopies},
	{"1000 messages delivered 1-3 times concurrently", testManyMessagesConcurrently},
	{"handler error releases the claim", testHandlerError},
	{"handler panic rolls back first", testHandlerPanic},
	{"failed commit is a nack", testCommitFailure},
	{"two consumers each process a message once", testTwoConsumers},
	{"bad keys and missing consumer", testBadKeys},
	{"database outage then recovery", testOutage},
	{"table names are validated, message data is parameterised", testInjection},
	{"InitializeSchema is idempotent", testInitializeSchemaTwice},
	{"keys compare byte for byte", testKeysCompareBytes},
}

func TestStoreConformance(t *testing.T) {
	stores := maps.Clone(backends)
	// clientFoundRows=true makes MySQL count a row that an upsert found but did not change
	// as affected: a claim that read the affected-row count took a duplicate for a new one.
	stores["database-sql/mariadb-clientFoundRows"] = func(t *testing.T) *backend {
		return mysqlBackendWith(t, "clientFoundRows=true")
	}
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			for _, c := range storeCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, stores[name](t)) })
			}
		})
	}
}

// recorder counts, per key, how often the handler ran and how often it failed.
type recorder struct {
	mu     sync.Mutex
	runs   map[string]int
	failed map[string]int
}

func newRecorder() *recorder {
	return &recorder{runs: map[string]int{}, failed: map[string]int{}}
}

func (r *recorder) ran(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key]++
	if err != nil {
		r.failed[key]++
	}
}

func (r *recorder) counts(key string) (runs, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key], r.failed[key]
}

// handler returns the inbox-wrapped handler for consumer that writes one business row per
// message. before, if set, runs first in the transaction; after runs once the row is written.
func (b *backend) handler(t *testing.T, consumer string, rec *recorder, logger watermill.LoggerAdapter,
	after func(msg *message.Message) error,
) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer}, logger)
	if err != nil {
		t.Fatal(err)
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		r, ok := b.inTx(ctx)
		if !ok {
			return nil, errors.New("no inbox transaction in the handler's context")
		}
		err := r.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", consumer, msg.UUID)
		if err == nil && after != nil {
			err = after(msg)
		}
		if rec != nil {
			rec.ran(msg.UUID, err)
		}
		return nil, err
	})
}

func deliver(ctx context.Context, h message.HandlerFunc, key string) error {
	msg := message.NewMessage(key, nil)
	msg.SetContext(ctx)
	_, err := h(msg)
	return err
}

// deliverUntilAcked delivers key again after each error, as a broker redelivers a nacked
// message, and returns the errors seen before the ack.
func deliverUntilAcked(t *testing.T, h message.HandlerFunc, key string) []error {
	t.Helper()
	var nacks []error
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := deliver(context.Background(), h, key)
		if err == nil {
			return nacks
		}
		nacks = append(nacks, err)
		if time.Now().After(deadline) {
			t.Errorf("message %q still nacked after %d deliveries: %v", key, len(nacks), err)
			return nacks
		}
		time.Sleep(time.Duration(len(nacks)) * 5 * time.Millisecond) // the broker's redelivery backoff
	}
}

func (b *backend) rows(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	n, err := b.direct.count(context.Background(), "SELECT COUNT(*) FROM "+table+" "+where, args...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *backend) invoices(t *testing.T, consumer, key string) int {
	return b.rows(t, b.business, "WHERE consumer = ? AND msg_key = ?", consumer, key)
}

func (b *backend) claims(t *testing.T, consumer, key string) int {
	return b.rows(t, b.table, "WHERE consumer = ? AND message_id = ?", consumer, key)
}

func wantRows(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d rows, want %d", what, got, want)
	}
}

func testFirstDelivery(t *testing.T, b *backend) {
	key := watermill.NewUUID()
	var inside, outside int
	var sawKey string
	h := b.handler(t, "billing", nil, nil, func(msg *message.Message) error {
		ctx := msg.Context()
		sawKey, _ = inbox.KeyFromContext(ctx)
		r, _ := b.inTx(ctx)
		var err error
		inside, err = r.count(ctx, "SELECT COUNT(*) FROM "+b.table+" WHERE consumer = ? AND message_id = ?", "billing", key)
		if err != nil {
			return err
		}
		outside, err = b.direct.count(ctx, "SELECT COUNT(*) FROM "+b.table+" WHERE consumer = ? AND message_id = ?", "billing", key)
		return err
	})
	if err := deliver(context.Background(), h, key); err != nil {
		t.Fatal(err)
	}
	if inside != 1 || outside != 0 {
		t.Errorf("during the handler the claim was seen by the handler's transaction %d times and by others %d times, want 1 and 0",
			inside, outside)
	}
	if sawKey != key {
		t.Errorf("KeyFromContext = %q, want %q", sawKey, key)
	}
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
}

func testSequentialDuplicate(t *testing.T, b *backend) {
	logger := watermill.NewCaptureLogger()
	rec := newRecorder()
	h := b.handler(t, "billing", rec, logger, nil)
	key := watermill.NewUUID()
	for i := range 3 {
		if err := deliver(context.Background(), h, key); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if runs, _ := rec.counts(key); runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
	logs := logger.Captured()
	if errs := logs[watermill.ErrorLogLevel]; len(errs) > 0 {
		t.Errorf("duplicates logged as errors: %v", errs)
	}
	if debug := logs[watermill.DebugLogLevel]; len(debug) != 2 {
		t.Errorf("%d debug logs, want one per duplicate (2)", len(debug))
	}
}

func testConcurrentCopies(t *testing.T, b *backend) {
	const goroutines, copiesEach = 8, 8
	rec := newRecorder()
	h := b.handler(t, "billing", rec, nil, nil)
	key := watermill.NewUUID()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var nacks []error
	for range goroutines {
		wg.Go(func() {
			<-start
			for range copiesEach {
				n := deliverUntilAcked(t, h, key)
				mu.Lock()
				nacks = append(nacks, n...)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	runs, failed := rec.counts(key)
	if runs-failed != 1 {
		t.Errorf("handler succeeded %d times (%d runs, %d failed), want once", runs-failed, runs, failed)
	}
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
	checkNacksRetriable(t, b, nacks)
}

func testManyMessagesConcurrently(t *testing.T, b *backend) {
	const messages, workers = 1000, 16
	rec := newRecorder()
	h := b.handler(t, "billing", rec, nil, nil)
	var deliveries []string
	for range messages {
		key := watermill.NewUUID()
		for range 1 + rand.IntN(3) {
			deliveries = append(deliveries, key)
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	queue := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var nacks []error
	for range workers {
		wg.Go(func() {
			for key := range queue {
				n := deliverUntilAcked(t, h, key)
				mu.Lock()
				nacks = append(nacks, n...)
				mu.Unlock()
			}
		})
	}
	for _, key := range deliveries {
		queue <- key
	}
	close(queue)
	wg.Wait()

	wantRows(t, "distinct invoiced messages", b.rows(t,
		"(SELECT DISTINCT msg_key FROM "+b.business+") d", ""), messages)
	wantRows(t, "messages invoiced other than once", b.rows(t,
		"(SELECT msg_key FROM "+b.business+" GROUP BY msg_key HAVING COUNT(*) <> 1) d", ""), 0)
	wantRows(t, "claims", b.rows(t, b.table, ""), messages)
	t.Logf("%d deliveries of %d messages, %d nacked and redelivered", len(deliveries), messages, len(nacks))
	checkNacksRetriable(t, b, nacks)
}

// checkNacksRetriable fails on any nack that is not a race the database resolved with an
// error (deadlock, lock timeout, busy): with no faults injected, nothing else may fail.
func checkNacksRetriable(t *testing.T, b *backend, nacks []error) {
	t.Helper()
	for _, err := range nacks {
		if !b.retriable(err) {
			t.Errorf("unexpected nack: %v", err)
			return
		}
	}
}

func testHandlerError(t *testing.T, b *backend) {
	errPayment := errors.New("payment provider down")
	rec := newRecorder()
	h := b.handler(t, "billing", rec, nil, func(msg *message.Message) error {
		if runs, _ := rec.counts(msg.UUID); runs == 0 {
			return errPayment
		}
		return nil
	})
	key := watermill.NewUUID()
	if err := deliver(context.Background(), h, key); !errors.Is(err, errPayment) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	wantRows(t, "invoices after the error", b.invoices(t, "billing", key), 0)
	wantRows(t, "claims after the error", b.claims(t, "billing", key), 0)

	if err := deliver(context.Background(), h, key); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if runs, _ := rec.counts(key); runs != 2 {
		t.Errorf("handler ran %d times, want 2", runs)
	}
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
}

func testHandlerPanic(t *testing.T, b *backend) {
	panicked := false
	h := b.handler(t, "billing", nil, nil, func(*message.Message) error {
		if !panicked {
			panicked = true
			panic("handler bug")
		}
		return nil
	})
	key := watermill.NewUUID()
	func() {
		defer func() {
			if r := recover(); r != "handler bug" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = deliver(context.Background(), h, key)
	}()
	wantRows(t, "invoices after the panic", b.invoices(t, "billing", key), 0)
	wantRows(t, "claims after the panic", b.claims(t, "billing", key), 0)

	if err := deliver(context.Background(), h, key); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
}

func testCommitFailure(t *testing.T, b *backend) {
	if len(b.commitFaults) == 0 {
		t.Fatal("backend defines no commit fault")
	}
	for name, fault := range b.commitFaults {
		t.Run(name, func(t *testing.T) {
			key := watermill.NewUUID()
			injected := false
			h := b.handler(t, "billing", nil, nil, func(msg *message.Message) error {
				if injected {
					return nil
				}
				injected = true
				return fault(msg.Context())
			})
			err := deliver(context.Background(), h, key)
			if err == nil {
				t.Fatal("delivery with a failed commit returned nil: the message would be acked")
			}
			t.Logf("nack: %v", err)
			wantRows(t, "invoices after the failed commit", b.invoices(t, "billing", key), 0)
			wantRows(t, "claims after the failed commit", b.claims(t, "billing", key), 0)

			deliverUntilAcked(t, h, key)
			wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
			wantRows(t, "claims", b.claims(t, "billing", key), 1)
		})
	}
}

func testTwoConsumers(t *testing.T, b *backend) {
	billing := b.handler(t, "billing", nil, nil, nil)
	shipping := b.handler(t, "shipping", nil, nil, nil)
	key := watermill.NewUUID()
	for range 2 {
		for _, h := range []message.HandlerFunc{billing, shipping} {
			if err := deliver(context.Background(), h, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, consumer := range []string{"billing", "shipping"} {
		wantRows(t, consumer+" invoices", b.invoices(t, consumer, key), 1)
		wantRows(t, consumer+" claims", b.claims(t, consumer, key), 1)
	}
}

func testBadKeys(t *testing.T, b *backend) {
	h := b.handler(t, "billing", nil, nil, nil)
	for _, tc := range []struct {
		name, key string
		want      error
	}{
		{"empty UUID", "", inbox.ErrEmptyKey},
		{"one byte too long", strings.Repeat("k", inbox.MaxKeyLength+1), inbox.ErrKeyTooLong},
		{"invalid UTF-8", "order-\xff\xfe", inbox.ErrInvalidKey},
	} {
		if err := deliver(context.Background(), h, tc.key); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	wantRows(t, "claims after bad keys", b.rows(t, b.table, ""), 0)
	wantRows(t, "invoices after bad keys", b.rows(t, b.business, ""), 0)

	// The longest key fits the column on every database: no truncation, no error.
	longest := strings.Repeat("é", inbox.MaxKeyLength/2) + "x"
	if err := deliver(context.Background(), h, longest); err != nil {
		t.Fatalf("key of %d bytes: %v", len(longest), err)
	}
	wantRows(t, "claims of the longest key", b.claims(t, "billing", longest), 1)
	if err := deliver(context.Background(), h, longest); err != nil {
		t.Fatal(err)
	}
	wantRows(t, "invoices of the longest key", b.invoices(t, "billing", longest), 1)

	noConsumer, err := inbox.NewMiddleware(b.store, inbox.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h = noConsumer(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	if err := deliver(context.Background(), h, watermill.NewUUID()); !errors.Is(err, inbox.ErrNoConsumer) {
		t.Errorf("no consumer: err = %v, want ErrNoConsumer", err)
	}
}

func testOutage(t *testing.T, b *backend) {
	rec := newRecorder()
	h := b.handler(t, "billing", rec, nil, nil)
	warm := watermill.NewUUID() // put connections in the pool, so the outage breaks them
	if err := deliver(context.Background(), h, warm); err != nil {
		t.Fatal(err)
	}

	key := watermill.NewUUID()
	restore := b.outage()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := deliver(ctx, h, key)
	cancel()
	restore()
	if err == nil {
		t.Fatal("delivery during the outage returned nil: the message would be acked unprocessed")
	}
	t.Logf("nack during the outage: %v", err)
	if runs, _ := rec.counts(key); runs != 0 {
		t.Errorf("handler ran %d times during the outage", runs)
	}

	deliverUntilAcked(t, h, key)
	wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
	wantRows(t, "claims", b.claims(t, "billing", key), 1)
}

func testInjection(t *testing.T, b *backend) {
	for _, table := range []string{
		"inbox; DROP TABLE " + b.business, `inbox" (x int); --`, "inbox`", "a.b.c", "1inbox", "",
	} {
		_, err := b.newStore(sqlinbox.Config{Table: table})
		if table == "" {
			if err != nil {
				t.Errorf("empty table name (the default): %v", err)
			}
			continue
		}
		if !errors.Is(err, inbox.ErrInvalidTableName) {
			t.Errorf("table %q: err = %v, want ErrInvalidTableName", table, err)
		}
	}

	h := b.handler(t, "billing", nil, nil, nil)
	for _, key := range []string{
		"'); DROP TABLE " + b.business + "; --",
		`" OR 1=1; --`,
		"`; DELETE FROM " + b.table + "; --",
		`\'; SELECT 1; --`,
	} {
		for range 2 {
			if err := deliver(context.Background(), h, key); err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
		}
		wantRows(t, fmt.Sprintf("claims of %q", key), b.claims(t, "billing", key), 1)
		wantRows(t, fmt.Sprintf("invoices of %q", key), b.invoices(t, "billing", key), 1)
	}
}

func testInitializeSchemaTwice(t *testing.T, b *backend) {
	s, ok := b.store.(interface{ InitializeSchema(context.Context) error })
	if !ok {
		t.Fatalf("%T has no InitializeSchema", b.store)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- s.InitializeSchema(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("InitializeSchema on an existing table: %v", err)
		}
	}
}

// Keys that differ only in case, or only in Unicode normalisation, are different keys on
// every database (MySQL's default collations would make them one: the columns are
// VARBINARY there).
func testKeysCompareBytes(t *testing.T, b *backend) {
	rec := newRecorder()
	h := b.handler(t, "billing", rec, nil, nil)
	keys := []string{"Order-A", "order-a", "ORDER-A", "caf\u00e9", "cafe\u0301"}
	for _, key := range keys {
		if err := deliver(context.Background(), h, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		if runs, _ := rec.counts(key); runs != 1 {
			t.Errorf("key %q: handler ran %d times, want 1", key, runs)
		}
		wantRows(t, fmt.Sprintf("claims of %q", key), b.claims(t, "billing", key), 1)
	}
	wantRows(t, "claims", b.rows(t, b.table, ""), len(keys))
}

package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
)

// cases are the suite: every case runs on a fresh harness.
var cases = []struct {
	name string
	run  func(t *testing.T, s *suite)
}{
	{"first delivery commits claim and business row together", testFirstDelivery},
	{"sequential duplicate is skipped and not an error", testSequentialDuplicate},
	{"concurrent copies of one message", testConcurrentCopies},
	{"1000 messages delivered 1-3 times concurrently", testManyMessagesConcurrently},
	{"handler error releases the claim", testHandlerError},
	{"handler panic rolls back first", testHandlerPanic},
	{"failed commit is a nack", testCommitFailure},
	{"failed commits and rollbacks end their transactions", testFailuresEndTheTransaction},
	{"two consumers each process a message once", testTwoConsumers},
	{"bad keys and missing consumer", testBadKeys},
	{"database outage then recovery", testOutage},
	{"table names are validated, message data is parameterised", testInjection},
	{"InitializeSchema is idempotent", testInitializeSchemaTwice},
	{"keys compare byte for byte", testKeysCompareBytes},
	{"a table that cannot guard is refused", testUnguardedTable},
}

func testFirstDelivery(t *testing.T, s *suite) {
	key := watermill.NewUUID()
	var inside, outside int
	var sawKey string
	h := s.handler(t, "billing", nil, nil, func(msg *message.Message) error {
		ctx := msg.Context()
		sawKey, _ = inbox.KeyFromContext(ctx)
		if s.writeBehind() {
			return nil // the handler runs before the claim, in no transaction
		}
		r, _ := s.InTx(ctx)
		var err error
		inside, err = r.Count(ctx, "SELECT COUNT(*) FROM "+s.Table+" WHERE consumer = ? AND message_id = ?", "billing", key)
		if err != nil {
			return err
		}
		outside, err = s.Direct.Count(ctx, "SELECT COUNT(*) FROM "+s.Table+" WHERE consumer = ? AND message_id = ?", "billing", key)
		return err
	})
	if err := Deliver(context.Background(), h, key); err != nil {
		t.Fatal(err)
	}
	if !s.writeBehind() && (inside != 1 || outside != 0) {
		t.Errorf("during the handler the claim was seen by the handler's transaction %d times and by others %d times, want 1 and 0",
			inside, outside)
	}
	if sawKey != key {
		t.Errorf("KeyFromContext = %q, want %q", sawKey, key)
	}
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
}

func testSequentialDuplicate(t *testing.T, s *suite) {
	logger := watermill.NewCaptureLogger()
	rec := newRecorder()
	h := s.handler(t, "billing", rec, logger, nil)
	key := watermill.NewUUID()
	for i := range 3 {
		if err := Deliver(context.Background(), h, key); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if runs, _ := rec.counts(key); runs != 1 && !s.writeBehind() {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
	logs := logger.Captured()
	if errs := logs[watermill.ErrorLogLevel]; len(errs) > 0 {
		t.Errorf("duplicates logged as errors: %v", errs)
	}
	if debug := logs[watermill.DebugLogLevel]; len(debug) != 2 {
		t.Errorf("%d debug logs, want one per duplicate (2)", len(debug))
	}
}

func testConcurrentCopies(t *testing.T, s *suite) {
	const goroutines, copiesEach = 8, 8
	rec := newRecorder()
	h := s.handler(t, "billing", rec, nil, nil)
	key := watermill.NewUUID()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var nacks []error
	for range goroutines {
		wg.Go(func() {
			<-start
			for range copiesEach {
				n := DeliverUntilAcked(t, h, key)
				mu.Lock()
				nacks = append(nacks, n...)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	runs, failed := rec.counts(key)
	if runs-failed != 1 && !s.writeBehind() {
		t.Errorf("handler succeeded %d times (%d runs, %d failed), want once", runs-failed, runs, failed)
	}
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
	checkNacksRetriable(t, s, nacks)
}

func testManyMessagesConcurrently(t *testing.T, s *suite) {
	const messages, workers = 1000, 16
	rec := newRecorder()
	h := s.handler(t, "billing", rec, nil, nil)
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
				n := DeliverUntilAcked(t, h, key)
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

	WantRows(t, "distinct invoiced messages", s.rows(t,
		"(SELECT DISTINCT msg_key FROM "+s.Business+") d", ""), messages)
	WantRows(t, "messages invoiced other than once", s.rows(t,
		"(SELECT msg_key FROM "+s.Business+" GROUP BY msg_key HAVING COUNT(*) <> 1) d", ""), 0)
	WantRows(t, "claims", s.rows(t, s.Table, ""), messages)
	t.Logf("%d deliveries of %d messages, %d nacked and redelivered", len(deliveries), messages, len(nacks))
	checkNacksRetriable(t, s, nacks)
}

// checkNacksRetriable fails on any nack that is not a race the database resolved with an
// error (deadlock, lock timeout, busy): with no faults injected, nothing else may fail.
func checkNacksRetriable(t *testing.T, s *suite, nacks []error) {
	t.Helper()
	for _, err := range nacks {
		if !s.retriable(err) {
			t.Errorf("unexpected nack: %v", err)
			return
		}
	}
}

func testHandlerError(t *testing.T, s *suite) {
	errPayment := errors.New("payment provider down")
	rec := newRecorder()
	h := s.handler(t, "billing", rec, nil, func(msg *message.Message) error {
		if runs, _ := rec.counts(msg.UUID); runs == 0 {
			return errPayment
		}
		return nil
	})
	key := watermill.NewUUID()
	if err := Deliver(context.Background(), h, key); !errors.Is(err, errPayment) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	WantRows(t, "invoices after the error", s.invoices(t, "billing", key), 0)
	WantRows(t, "claims after the error", s.claims(t, "billing", key), 0)

	if err := Deliver(context.Background(), h, key); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if runs, _ := rec.counts(key); runs != 2 {
		t.Errorf("handler ran %d times, want 2", runs)
	}
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
}

func testHandlerPanic(t *testing.T, s *suite) {
	panicked := false
	h := s.handler(t, "billing", nil, nil, func(*message.Message) error {
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
		_ = Deliver(context.Background(), h, key)
	}()
	WantRows(t, "invoices after the panic", s.invoices(t, "billing", key), 0)
	WantRows(t, "claims after the panic", s.claims(t, "billing", key), 0)

	if err := Deliver(context.Background(), h, key); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
}

// commitFaults returns the faults that make a handler's COMMIT fail, in this mode: the
// handler's own in the claim-first mode, and the queued ones when the handlers queue.
func (s *suite) commitFaults(t *testing.T) map[string]func(ctx context.Context) error {
	t.Helper()
	faults := map[string]func(ctx context.Context) error{}
	if !s.writeBehind() {
		if len(s.CommitFaults) == 0 {
			t.Fatal("the harness defines no commit fault")
		}
		maps.Copy(faults, s.CommitFaults)
	}
	if !s.queues() {
		return faults
	}
	if len(s.QueuedCommitFaults) == 0 && s.writeBehind() {
		t.Skip("the harness defines no QueuedCommitFaults, which write-behind mode needs")
	}
	for name, q := range s.QueuedCommitFaults {
		if !s.writeBehind() {
			name = "queued: " + name // the handler's own faults may have the same names
		}
		faults[name] = func(ctx context.Context) error { return inbox.ExecAtCommit(ctx, s.placeholders(q.SQL), q.Args...) }
	}
	return faults
}

func testCommitFailure(t *testing.T, s *suite) {
	for name, fault := range s.commitFaults(t) {
		t.Run(name, func(t *testing.T) {
			key := watermill.NewUUID()
			injected := false
			h := s.handler(t, "billing", nil, nil, func(msg *message.Message) error {
				if injected {
					return nil
				}
				injected = true
				return fault(msg.Context())
			})
			err := Deliver(context.Background(), h, key)
			if err == nil {
				t.Fatal("delivery with a failed commit returned nil: the message would be acked")
			}
			t.Logf("nack: %v", err)
			WantRows(t, "invoices after the failed commit", s.invoices(t, "billing", key), 0)
			WantRows(t, "claims after the failed commit", s.claims(t, "billing", key), 0)

			DeliverUntilAcked(t, h, key)
			WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
			WantRows(t, "claims", s.claims(t, "billing", key), 1)
		})
	}
}

// The Tx contract: Commit ends the transaction even when it fails, and so does Rollback.
// More failed commits and rollbacks than a pool has connections (the integration harnesses
// use 16), then a delivery must still find a connection and the lock free.
func testFailuresEndTheTransaction(t *testing.T, s *suite) {
	const rounds = 20
	errHandler := errors.New("planned failure")
	for name, fault := range s.commitFaults(t) {
		t.Run(name, func(t *testing.T) {
			rollbacks, commits := 0, 0
			h := s.handler(t, "billing", nil, nil, func(msg *message.Message) error {
				switch {
				case rollbacks < rounds:
					rollbacks++
					return errHandler
				case commits < rounds:
					commits++
					return fault(msg.Context())
				}
				return nil
			})
			before := s.rows(t, s.Table, "")
			// One deadline for all: a store that leaks transactions fails in a minute, not in
			// a wait per delivery.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range 2 * rounds {
				if err := Deliver(ctx, h, watermill.NewUUID()); err == nil {
					t.Fatalf("delivery %d: the planned failure was acked", i+1)
				}
			}
			key := watermill.NewUUID()
			if err := Deliver(ctx, h, key); err != nil {
				t.Fatalf("after %d rolled back and %d failed commits: %v", rollbacks, commits, err)
			}
			WantRows(t, "claims", s.rows(t, s.Table, ""), before+1)
			WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
		})
	}
}

func testTwoConsumers(t *testing.T, s *suite) {
	billing := s.handler(t, "billing", nil, nil, nil)
	shipping := s.handler(t, "shipping", nil, nil, nil)
	key := watermill.NewUUID()
	for range 2 {
		for _, h := range []message.HandlerFunc{billing, shipping} {
			if err := Deliver(context.Background(), h, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, consumer := range []string{"billing", "shipping"} {
		WantRows(t, consumer+" invoices", s.invoices(t, consumer, key), 1)
		WantRows(t, consumer+" claims", s.claims(t, consumer, key), 1)
	}
}

func testBadKeys(t *testing.T, s *suite) {
	h := s.handler(t, "billing", nil, nil, nil)
	for _, tc := range []struct {
		name, key string
		want      error
	}{
		{"empty UUID", "", inbox.ErrInvalidKey},
		{"one byte too long", strings.Repeat("k", inbox.MaxKeyLength+1), inbox.ErrInvalidKey},
		{"invalid UTF-8", "order-\xff\xfe", inbox.ErrInvalidKey},
		{"a newline", "order-1\n[watermill] forged line", inbox.ErrInvalidKey},
		{"an escape sequence", "order-1\x1b]0;title\x07", inbox.ErrInvalidKey},
		{"a C1 control", "order-1\u009b2J", inbox.ErrInvalidKey},
	} {
		if err := Deliver(context.Background(), h, tc.key); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	WantRows(t, "claims after bad keys", s.rows(t, s.Table, ""), 0)
	WantRows(t, "invoices after bad keys", s.rows(t, s.Business, ""), 0)

	// The longest key fits the column on every database: no truncation, no error.
	longest := strings.Repeat("é", inbox.MaxKeyLength/2) + "x"
	if err := Deliver(context.Background(), h, longest); err != nil {
		t.Fatalf("key of %d bytes: %v", len(longest), err)
	}
	WantRows(t, "claims of the longest key", s.claims(t, "billing", longest), 1)
	if err := Deliver(context.Background(), h, longest); err != nil {
		t.Fatal(err)
	}
	WantRows(t, "invoices of the longest key", s.invoices(t, "billing", longest), 1)

	// A configuration without a consumer is refused; a handler that a consumer map does not
	// know (outside a router, a renamed one) fails before any claim.
	config := s.options.Config
	config.Consumer = ""
	if _, err := inbox.NewMiddleware(s.Store, config, nil); !errors.Is(err, inbox.ErrNoConsumer) {
		t.Errorf("no consumer: NewMiddleware err = %v, want ErrNoConsumer", err)
	}
	config.ConsumerByHandler = map[string]string{"billing": "billing"}
	unmapped, err := inbox.NewMiddleware(s.Store, config, nil)
	if err != nil {
		t.Fatal(err)
	}
	h = unmapped(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	if err := Deliver(context.Background(), h, watermill.NewUUID()); !errors.Is(err, inbox.ErrNoConsumer) {
		t.Errorf("no consumer for the handler: err = %v, want ErrNoConsumer", err)
	}
	WantRows(t, "claims without a consumer", s.rows(t, s.Table, ""), 1) // the longest key's
}

func testOutage(t *testing.T, s *suite) {
	if s.Outage == nil {
		t.Skip("the harness defines no Outage")
	}
	rec := newRecorder()
	h := s.handler(t, "billing", rec, nil, nil)
	warm := watermill.NewUUID() // put connections in the pool, so the outage breaks them
	if err := Deliver(context.Background(), h, warm); err != nil {
		t.Fatal(err)
	}

	key := watermill.NewUUID()
	restore := s.Outage()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := Deliver(ctx, h, key)
	cancel()
	restore()
	if err == nil {
		t.Fatal("delivery during the outage returned nil: the message would be acked unprocessed")
	}
	t.Logf("nack during the outage: %v", err)
	if runs, _ := rec.counts(key); runs != 0 && !s.writeBehind() {
		t.Errorf("handler ran %d times during the outage", runs)
	}

	DeliverUntilAcked(t, h, key)
	WantRows(t, "invoices", s.invoices(t, "billing", key), 1)
	WantRows(t, "claims", s.claims(t, "billing", key), 1)
}

func testInjection(t *testing.T, s *suite) {
	for _, table := range []string{
		"inbox; DROP TABLE " + s.Business, `inbox" (x int); --`, "inbox`", "a.b.c", "1inbox", "",
	} {
		if s.NewStore == nil {
			t.Log("the harness defines no NewStore: table names not checked")
			break
		}
		_, err := s.NewStore(table)
		if table == "" {
			if err != nil {
				t.Errorf("empty table name (the default): %v", err)
			}
			continue
		}
		if err == nil {
			t.Errorf("table %q: accepted, want it refused", table)
		}
	}

	h := s.handler(t, "billing", nil, nil, nil)
	for _, key := range []string{
		"'); DROP TABLE " + s.Business + "; --",
		`" OR 1=1; --`,
		"`; DELETE FROM " + s.Table + "; --",
		`\'; SELECT 1; --`,
	} {
		for range 2 {
			if err := Deliver(context.Background(), h, key); err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
		}
		WantRows(t, fmt.Sprintf("claims of %q", key), s.claims(t, "billing", key), 1)
		WantRows(t, fmt.Sprintf("invoices of %q", key), s.invoices(t, "billing", key), 1)
	}
}

func testInitializeSchemaTwice(t *testing.T, s *suite) {
	initializer, ok := s.Store.(interface{ InitializeSchema(context.Context) error })
	if !ok {
		t.Skipf("%T has no InitializeSchema", s.Store)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- initializer.InitializeSchema(context.Background()) })
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
func testKeysCompareBytes(t *testing.T, s *suite) {
	rec := newRecorder()
	h := s.handler(t, "billing", rec, nil, nil)
	keys := []string{"Order-A", "order-a", "ORDER-A", "caf\u00e9", "cafe\u0301"}
	for _, key := range keys {
		if err := Deliver(context.Background(), h, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		if runs, _ := rec.counts(key); runs != 1 {
			t.Errorf("key %q: handler ran %d times, want 1", key, runs)
		}
		WantRows(t, fmt.Sprintf("claims of %q", key), s.claims(t, "billing", key), 1)
	}
	WantRows(t, "claims", s.rows(t, s.Table, ""), len(keys))
}

// A store on an inbox table that cannot guard against duplicates (no primary key, a primary
// key on message_id alone) fails every message before it is processed, with an error wrapping
// sqlinbox.ErrTableMismatch (matched by its message here, so that this package imports no
// store): nothing is committed and, in claim-first mode, the handler does not run. The
// store's own table passes its check, where the store has one (CheckTable).
func testUnguardedTable(t *testing.T, s *suite) {
	if checker, ok := s.Store.(interface{ CheckTable(context.Context) error }); ok {
		if err := checker.CheckTable(context.Background()); err != nil {
			t.Errorf("CheckTable on the harness's table: %v", err)
		}
	}
	if s.NewStore == nil {
		t.Skip("the harness defines no NewStore: no other table to try")
	}
	for i, key := range []string{"", ", PRIMARY KEY (message_id)"} {
		table := fmt.Sprintf("%s_unguarded%d", s.Table, i)
		ctx := context.Background()
		if err := s.Direct.Exec(ctx, "CREATE TABLE "+table+" (consumer VARCHAR(255) NOT NULL, message_id VARCHAR(255) NOT NULL"+key+")"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Direct.Exec(context.WithoutCancel(ctx), "DROP TABLE "+table) })
		store, err := s.NewStore(table)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		h := (&suite{Harness: &Harness{Store: store, Business: s.Business, InTx: s.InTx, Placeholders: s.Placeholders}, options: s.options}).
			handler(t, "billing", rec, nil, nil)
		for range 2 {
			err := Deliver(ctx, h, "order-1")
			if err == nil || !strings.Contains(err.Error(), "cannot guard against duplicates") {
				t.Errorf("table %s: delivery: err = %v, want the table refused (sqlinbox.ErrTableMismatch)", table, err)
			}
		}
		if runs, _ := rec.counts("order-1"); !s.writeBehind() && runs != 0 {
			t.Errorf("table %s: the handler ran %d times, want 0", table, runs)
		}
		WantRows(t, "invoices", s.invoices(t, "billing", "order-1"), 0)
		WantRows(t, "claims in "+table, s.rows(t, table, ""), 0)
	}
}

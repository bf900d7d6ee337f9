package integration

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The tests in this file run the inbox inside a full stack of Watermill's own middleware,
// on RabbitMQ and PostgreSQL: the order the README recommends, the orders it warns about,
// and the two ways of combining the inbox with middleware.Deduplicator that lose messages.

// orderKind says how the billing handler treats an order, run by run.
type orderKind string

const (
	plainOrder orderKind = "plain"     // every run succeeds
	slowOnce   orderKind = "slow once" // the first run hangs until its context is done
	failOnce   orderKind = "fail once" // the first run returns an error after writing
	panicOnce  orderKind = "panic once"
	failTwice  orderKind = "fail twice" // an error, then a panic, then success
	pill       orderKind = "pill"       // every run fails: the only kind a retry cannot process
)

var errStackInjected = errors.New("injected: payment service unavailable")

// stackRetries is the recommended inbox.ShouldRetry's count, and the fixed MaxRetries of the
// plain Retry: a message that fails on its own gets 1+stackRetries attempts per delivery.
const stackRetries = poisonRetries

// stackMiddlewares are the middlewares a stack is built from, each configured once.
type stackMiddlewares struct {
	poison, retry, recoverer, timeout, correlation, inbox message.HandlerMiddleware
	// fixedRetry is a Retry of stackRetries retries whatever failed, with Watermill's default
	// context handling, and retryResettingContext the same with ResetContextOnRetry: what
	// the stacks in the wrong order are shown with.
	fixedRetry, retryResettingContext message.HandlerMiddleware
}

// recommendedStack is the order the README recommends, outermost first.
func recommendedStack(m stackMiddlewares) []message.HandlerMiddleware {
	return []message.HandlerMiddleware{m.poison, m.retry, m.recoverer, m.inbox, m.timeout, m.correlation}
}

type stackOptions struct {
	handlers int   // router handlers, each its own RabbitMQ consumer: messages in flight
	poolSize int32 // connections in the inbox store's pool
	timeout  time.Duration
	// hold is how long every handler run keeps its transaction open before it returns.
	hold  time.Duration
	stack func(stackMiddlewares) []message.HandlerMiddleware
}

// stackRun is one router with opts.handlers handlers consuming one durable RabbitMQ queue
// of orders, writing one invoice per order through the inbox transaction and returning one
// InvoiceCreated event, which the router publishes to an events queue.
type stackRun struct {
	b                  *backend
	opts               stackOptions
	pool               *pgxpool.Pool // the store's
	in, events, poison *brokerQueue
	amqpConfig         amqp.Config
	publisher          *closingPublisher
	router             *message.Router
	routerDone         chan struct{}

	mu    sync.Mutex
	kinds map[string]orderKind // by order (message UUID)
	runs  map[string]int       // handler runs by order
	acked map[string]int       // acks by copy
	// deliveries counts by order the deliveries that reached the router's handler.
	deliveries map[string]int
	copies     int

	timedOut, panicked, failed atomic.Int64

	// onRun, if set before publishing, is called as a handler run starts; it returns what
	// to call as the run ends.
	onRun func() (done func())
	// sideWrite, if set before publishing, makes the handler also write through the
	// store's pool, outside the inbox transaction.
	sideWrite bool
}

func startStack(t *testing.T, opts stackOptions) *stackRun {
	t.Helper()
	amqpURL := testenv.AMQPURL(t)
	b := pgxBackend(t)
	pool := openPgxPool(t, testenv.PostgresURL(t), func(c *pgxpool.Config) { c.MaxConns = opts.poolSize })
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	r := &stackRun{
		b: b, opts: opts, pool: pool,
		in:         chaosQueue(t, amqpURL, testenv.Name("stack_orders")),
		events:     chaosQueue(t, amqpURL, testenv.Name("stack_invoices")),
		poison:     chaosQueue(t, amqpURL, testenv.Name("stack_poison")),
		amqpConfig: amqp.NewDurableQueueConfig(amqpURL),
		kinds:      map[string]orderKind{},
		runs:       map[string]int{},
		acked:      map[string]int{},
		deliveries: map[string]int{},
		routerDone: make(chan struct{}),
	}
	logger := watermill.NopLogger{}
	publisher, err := amqp.NewPublisher(r.amqpConfig, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.publisher = &closingPublisher{Publisher: publisher}
	t.Cleanup(func() { _ = r.publisher.Close() })

	inboxMW, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	poisonMW, err := middleware.PoisonQueueWithFilter(r.publisher, r.poison.name, inbox.Poisonous)
	if err != nil {
		t.Fatal(err)
	}
	retry := recommendedRetry(logger)
	fixed := middleware.Retry{MaxRetries: stackRetries, InitialInterval: 20 * time.Millisecond, Multiplier: 2}
	resetting := fixed
	resetting.ResetContextOnRetry = true
	m := stackMiddlewares{
		poison: poisonMW, retry: retry.Middleware, fixedRetry: fixed.Middleware, retryResettingContext: resetting.Middleware,
		recoverer: middleware.Recoverer, timeout: middleware.Timeout(opts.timeout),
		correlation: middleware.CorrelationID, inbox: inboxMW,
	}

	r.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	// Outermost, outside the stack under test: whatever reaches the router as success is acked.
	r.router.AddMiddleware(r.countAcks)
	r.router.AddMiddleware(opts.stack(m)...)
	sub, err := amqp.NewSubscriber(r.amqpConfig, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	for i := range opts.handlers {
		r.router.AddHandler("billing_"+strconv.Itoa(i), r.in.name, sub, r.events.name, r.publisher, r.handle)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.routerDone)
		if err := r.router.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); r.stop(t) })
	<-r.router.Running()
	return r
}

// closingPublisher is an amqp.Publisher that refuses to publish once closed, and closes only
// when no publish is under way. A message nacked in a loop can reach a handler after
// Router.Close has stopped waiting for handlers; watermill-amqp's Close does not synchronise
// with a Publish running then.
type closingPublisher struct {
	*amqp.Publisher
	mu     sync.RWMutex
	closed bool
}

func (p *closingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errors.New("publisher closed")
	}
	return p.Publisher.Publish(topic, msgs...)
}

func (p *closingPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.Publisher.Close()
}

func (r *stackRun) stop(t *testing.T) {
	if err := r.router.Close(); err != nil {
		t.Errorf("closing router: %v", err)
	}
	<-r.routerDone
}

func (r *stackRun) countAcks(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		r.mu.Lock()
		r.deliveries[msg.UUID]++
		r.mu.Unlock()
		out, err := h(msg)
		if err == nil {
			r.mu.Lock()
			r.acked[msg.Metadata.Get("copy")]++
			r.mu.Unlock()
		}
		return out, err
	}
}

func (r *stackRun) handle(msg *message.Message) ([]*message.Message, error) {
	if r.onRun != nil {
		defer r.onRun()()
	}
	ctx := msg.Context()
	if r.sideWrite {
		if _, err := r.pool.Exec(ctx, "SELECT 1"); err != nil {
			return nil, fmt.Errorf("side write: %w", err)
		}
	}
	tx, ok := r.b.inTx(ctx)
	if !ok {
		return nil, errors.New("no inbox transaction in the handler's context")
	}
	if err := tx.exec(ctx, "INSERT INTO "+r.b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.runs[msg.UUID]++
	run, kind := r.runs[msg.UUID], r.kinds[msg.UUID]
	r.mu.Unlock()

	if r.opts.hold > 0 {
		select {
		case <-time.After(r.opts.hold): // a slow but healthy handler
		case <-ctx.Done():
			r.timedOut.Add(1)
			return nil, ctx.Err()
		}
	}
	switch {
	case kind == pill, kind == failOnce && run == 1, kind == failTwice && run == 1:
		r.failed.Add(1)
		return nil, errStackInjected
	case kind == panicOnce && run == 1, kind == failTwice && run == 2:
		r.panicked.Add(1)
		panic("injected panic in the billing handler")
	case kind == slowOnce && run == 1:
		<-ctx.Done() // hangs until middleware.Timeout gives up on it
		r.timedOut.Add(1)
		return nil, ctx.Err()
	}
	event := message.NewMessage(watermill.NewUUID(), []byte(msg.UUID))
	event.Metadata.Set("order", msg.UUID)
	return []*message.Message{event}, nil
}

// publish sends every order in copies copies, with a correlation ID, in random order (so
// copies of one order race across handlers), and returns the orders.
func (r *stackRun) publish(t *testing.T, kinds map[orderKind]int, copies int) []string {
	t.Helper()
	var orders []string
	r.mu.Lock()
	for kind, n := range kinds {
		for range n {
			order := watermill.NewUUID()
			r.kinds[order] = kind
			orders = append(orders, order)
		}
	}
	r.copies += copies * len(orders)
	r.mu.Unlock()
	var msgs []*message.Message
	for c := range copies {
		for _, order := range orders {
			msg := message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order))
			msg.Metadata.Set("copy", order+"/"+strconv.Itoa(c))
			middleware.SetCorrelationID("corr-"+order, msg)
			msgs = append(msgs, msg)
		}
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	if err := r.publisher.Publish(r.in.name, msgs...); err != nil {
		t.Fatal(err)
	}
	return orders
}

// publishWithoutUUID sends one message that cannot be claimed.
func (r *stackRun) publishWithoutUUID(t *testing.T) {
	t.Helper()
	msg := message.NewMessage("", []byte(`{}`))
	msg.Metadata.Set("copy", "no-uuid")
	r.mu.Lock()
	r.copies++
	r.mu.Unlock()
	if err := r.publisher.Publish(r.in.name, msg); err != nil {
		t.Fatal(err)
	}
}

// waitAcked waits until every published copy was acked, then stops the router, so that
// nothing is in flight when the test counts.
func (r *stackRun) waitAcked(t *testing.T) {
	t.Helper()
	acked := func() (n int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.acked {
			n += min(c, 1)
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for acked() != r.copies {
		if time.Now().After(deadline) {
			r.mu.Lock()
			var missing []string
			for order, kind := range r.kinds {
				for c := range r.copies {
					if id := order + "/" + strconv.Itoa(c); r.acked[id] == 0 && c < 2 {
						missing = append(missing, fmt.Sprintf("%s (%s, %d runs)", id, kind, r.runs[order]))
					}
				}
			}
			r.mu.Unlock()
			t.Fatalf("timed out: %d of %d copies acked; not acked: %v", acked(), r.copies, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.stop(t)
	// A copy can be left only if its ack was lost as the router closed, after it was acked
	// here: nothing that was not processed.
	for _, msg := range drain(t, r.in, 0) {
		r.mu.Lock()
		acked := r.acked[msg.Metadata.Get("copy")]
		r.mu.Unlock()
		if acked == 0 {
			t.Errorf("copy %s left in the orders queue, never acked", msg.Metadata.Get("copy"))
		}
	}
}

// drain takes every message from q (the router has stopped; its publishes are all sent)
// until want have arrived, then whatever else is there.
func drain(t *testing.T, q *brokerQueue, want int) []*message.Message {
	t.Helper()
	var got []*message.Message
	get := func() bool {
		d, ok, err := q.ch.Get(q.name, true)
		if err != nil {
			t.Fatalf("get from %s: %v", q.name, err)
		}
		if !ok {
			return false
		}
		msg, err := amqp.DefaultMarshaler{}.Unmarshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msg)
		return true
	}
	waitFor(t, fmt.Sprintf("%d messages in %s", want, q.name), func() bool {
		for get() {
		}
		return len(got) >= want
	})
	for get() {
	}
	return got
}

func (r *stackRun) runsOf(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[order]
}

func (r *stackRun) deliveriesOf(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deliveries[order]
}

// The README's stack, outermost first: PoisonQueueWithFilter(..., inbox.Poisonous), Retry with
// inbox.ShouldRetry, Recoverer, the inbox, Timeout, CorrelationID. Four handlers on one RabbitMQ queue; every order published twice; handlers
// that hang past the timeout, fail, panic, fail twice, and pills that fail every time; a
// message without a UUID. Nothing lost (one invoice, one claim and one event per order that
// can succeed), nothing doubled, nothing poisoned but the pills and the message without a UUID.
func TestRecommendedMiddlewareStackOnRabbitMQ(t *testing.T) {
	r := startStack(t, stackOptions{handlers: 4, poolSize: 4, timeout: 300 * time.Millisecond, hold: 10 * time.Millisecond,
		stack: recommendedStack})
	kinds := map[orderKind]int{plainOrder: 40, slowOnce: 8, failOnce: 10, panicOnce: 10, failTwice: 8, pill: 4}
	orders := r.publish(t, kinds, 2)
	r.publishWithoutUUID(t)
	r.waitAcked(t)

	processable := 0
	for _, order := range orders {
		kind := r.kinds[order]
		want := 1
		if kind == pill {
			want = 0
			// Every attempt ran the handler: 1+stackRetries runs in each delivery.
			if runs, deliveries := r.runsOf(order), r.deliveriesOf(order); runs != deliveries*(1+stackRetries) {
				t.Errorf("pill: %d handler runs in %d deliveries, want %d each", runs, deliveries, 1+stackRetries)
			}
		} else {
			processable++
		}
		wantRows(t, string(kind)+" order's invoices", r.b.invoices(t, "billing", order), want)
		wantRows(t, string(kind)+" order's claims", r.b.claims(t, "billing", order), want)
		if kind == slowOnce && r.runsOf(order) < 2 {
			t.Errorf("slow order %s ran %d times, want a timed-out run and a retry", order, r.runsOf(order))
		}
	}
	wantRows(t, "invoices", r.b.rows(t, r.b.business, ""), processable)
	if r.timedOut.Load() < int64(kinds[slowOnce]) || r.panicked.Load() == 0 || r.failed.Load() == 0 {
		t.Errorf("faults not injected: %d runs timed out, %d panicked, %d failed",
			r.timedOut.Load(), r.panicked.Load(), r.failed.Load())
	}

	// Poisoned: both copies of every pill, and the message without a UUID; nothing else.
	poisoned := map[string]int{}
	for _, msg := range drain(t, r.poison, 2*kinds[pill]+1) {
		poisoned[msg.UUID]++
		reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey)
		switch {
		case msg.UUID == "":
			if !strings.Contains(reason, inbox.ErrInvalidKey.Error()) {
				t.Errorf("message without a UUID poisoned with %q, want ErrInvalidKey", reason)
			}
		case r.kinds[msg.UUID] != pill:
			t.Errorf("%s order %s poisoned (%q): a retry would have processed it", r.kinds[msg.UUID], msg.UUID, reason)
		case !strings.Contains(reason, errStackInjected.Error()):
			t.Errorf("pill poisoned with %q", reason)
		}
	}
	for _, order := range orders {
		if r.kinds[order] == pill && poisoned[order] != 2 {
			t.Errorf("pill %s poisoned %d times, want 2 (once per copy)", order, poisoned[order])
		}
	}

	// One event per processed order, with the order's correlation ID. A copy acked as a
	// duplicate publishes the recorded event again, under the same UUID.
	events := map[string]map[string]int{}
	for _, msg := range drain(t, r.events, processable) {
		order := msg.Metadata.Get("order")
		if events[order] == nil {
			events[order] = map[string]int{}
		}
		events[order][msg.UUID]++
		if got := middleware.MessageCorrelationID(msg); got != "corr-"+order {
			t.Errorf("event of %s has correlation ID %q", order, got)
		}
	}
	for _, order := range orders {
		if r.kinds[order] != pill && len(events[order]) != 1 {
			t.Errorf("%s order %s: events by UUID %v, want one UUID", r.kinds[order], order, events[order])
		}
	}
	if len(events) != processable {
		t.Errorf("events for %d orders, want %d", len(events), processable)
	}
}

// Why Timeout goes inside the inbox. middleware.Timeout puts a context on the message that it
// cancels when it returns, and never puts the previous one back; the inbox does put back the
// context it received. With Timeout outside the inbox, whatever runs after it sees a
// cancelled context: Retry's next attempt (Watermill's default Retry), whose claim then fails
// at once, and PoisonQueue, whose publish watermill-amqp makes with the message's context, so
// it fails and the router nacks: the pill comes back for ever instead of being poisoned.
// These tests assert those failures; docs/middleware-order.md cites them.
func TestTimeoutOutsideTheInbox(t *testing.T) {
	for _, c := range []struct {
		name string
		// runsPerDelivery is how many attempts of a delivery reach the handler.
		runsPerDelivery int
		stack           func(stackMiddlewares) []message.HandlerMiddleware
	}{
		{"Retry, Timeout, inbox: retries fail before the handler, poison publish fails", 1,
			func(m stackMiddlewares) []message.HandlerMiddleware {
				return []message.HandlerMiddleware{m.poison, m.fixedRetry, m.recoverer, m.timeout, m.inbox}
			}},
		{"Retry with ResetContextOnRetry, Timeout, inbox: poison publish fails", 1 + stackRetries,
			func(m stackMiddlewares) []message.HandlerMiddleware {
				return []message.HandlerMiddleware{m.poison, m.retryResettingContext, m.recoverer, m.timeout, m.inbox}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startStack(t, stackOptions{handlers: 1, poolSize: 1, timeout: 5 * time.Second, stack: c.stack})
			orders := r.publish(t, map[orderKind]int{pill: 1}, 1)
			// Three deliveries: the pill was not poisoned after its retries but nacked.
			waitFor(t, "the pill delivered three times", func() bool { return r.deliveriesOf(orders[0]) >= 3 })
			r.stop(t)
			runs, deliveries := r.runsOf(orders[0]), r.deliveriesOf(orders[0])
			// The last delivery may have been cut short by the router's close.
			if runs > c.runsPerDelivery*deliveries || runs < c.runsPerDelivery*(deliveries-1) {
				t.Errorf("%d handler runs in %d deliveries, want %d per delivery", runs, deliveries, c.runsPerDelivery)
			}
			if poisoned := drain(t, r.poison, 0); len(poisoned) != 0 {
				t.Errorf("%d messages poisoned, want none (the publish fails)", len(poisoned))
			}
		})
	}
}

// Every message in flight holds one pool connection from its claim to its commit. With fewer
// connections than messages in flight the others wait for one (the claim is outside Timeout
// in the recommended order): handler runs never overlap beyond the pool, and nothing fails.
// A handler that takes a second connection from the store's pool while it holds the inbox's
// waits for itself: with one connection it can never succeed, and Timeout and the retries
// end it in the poison queue.
func TestPoolSmallerThanMessagesInFlight(t *testing.T) {
	t.Run("pool 1, 4 in flight", func(t *testing.T) {
		r := startStack(t, stackOptions{handlers: 4, poolSize: 1, timeout: 5 * time.Second, hold: 30 * time.Millisecond, stack: recommendedStack})
		var running, most atomic.Int64
		r.onRun = func() func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return func() { running.Add(-1) }
		}
		orders := r.publish(t, map[orderKind]int{plainOrder: 24}, 1)
		r.waitAcked(t)
		for _, order := range orders {
			wantRows(t, "invoices", r.b.invoices(t, "billing", order), 1)
		}
		if n := len(drain(t, r.poison, 0)); n != 0 {
			t.Errorf("%d orders poisoned, want none", n)
		}
		if most.Load() != 1 {
			t.Errorf("at most %d handler runs at once, want 1 (one connection)", most.Load())
		}
	})
	t.Run("handler takes a second connection from the store's pool", func(t *testing.T) {
		r := startStack(t, stackOptions{handlers: 1, poolSize: 1, timeout: 200 * time.Millisecond, stack: recommendedStack})
		r.sideWrite = true
		orders := r.publish(t, map[orderKind]int{plainOrder: 2}, 1)
		r.waitAcked(t)
		poisoned := drain(t, r.poison, 2)
		for _, msg := range poisoned {
			if reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey); !strings.Contains(reason, context.DeadlineExceeded.Error()) {
				t.Errorf("poisoned with %q, want the deadline exceeded waiting for a second connection", reason)
			}
		}
		for _, order := range orders {
			wantRows(t, "invoices of an order whose handler waited for a second connection", r.b.invoices(t, "billing", order), 0)
		}
	})
}

// middleware.Deduplicator must not be combined with the inbox: it records a message before
// the handler runs and keeps it when the handler fails. Every order's first run fails and
// RabbitMQ redelivers it. Outside the inbox, the redelivery is acked as a duplicate with
// nothing claimed; inside, the inbox commits a claim for a handler that never succeeded.
// Either way every order is lost; these tests assert the loss docs/middleware-order.md documents.
func TestDeduplicatorWithTheInboxLosesMessages(t *testing.T) {
	for _, c := range []struct {
		name       string
		dedupFirst bool
		wantClaims int
	}{
		{"Deduplicator outside the inbox", true, 0},
		{"Deduplicator inside the inbox", false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen, err := middleware.NewMapExpiringKeyRepository(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// Watermill's defaults, made explicit so both handlers share one repository.
			dedup := (&middleware.Deduplicator{
				KeyFactory: middleware.NewMessageHasherAdler32(math.MaxInt64),
				Repository: seen,
				Timeout:    time.Minute,
			}).Middleware
			r := startStack(t, stackOptions{handlers: 2, poolSize: 2, stack: func(m stackMiddlewares) []message.HandlerMiddleware {
				if c.dedupFirst {
					return []message.HandlerMiddleware{m.recoverer, dedup, m.inbox}
				}
				return []message.HandlerMiddleware{m.recoverer, m.inbox, dedup}
			}})
			orders := r.publish(t, map[orderKind]int{failOnce: 10}, 1)
			r.waitAcked(t)
			for _, order := range orders {
				if n := r.runsOf(order); n != 1 {
					t.Errorf("order %s: handler ran %d times, want once (the failed run)", order, n)
				}
				wantRows(t, "invoices of an acked order", r.b.invoices(t, "billing", order), 0)
				wantRows(t, "claims of an order whose handler never succeeded", r.b.claims(t, "billing", order), c.wantClaims)
			}
		})
	}
}

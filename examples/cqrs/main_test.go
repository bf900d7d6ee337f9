package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// sent is one message the broker accepted.
type sent struct {
	topic, uuid, name, orderID string
	msg                        *message.Message
}

// flakyBroker is the RabbitMQ publisher the inbox.Publisher publishes through, as an
// at-least-once broker and a flaky network make it: every message accepted is sent 1-3
// times (copies under one UUID), and while failures last, every third publish of
// InvoiceIssued fails with nothing sent.
type flakyBroker struct {
	message.Publisher
	eventsTopic string

	mu       sync.Mutex
	calls    int
	failures int // still to inject
	failed   int
	accepted []sent
}

func (b *flakyBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	b.calls++
	if topic == b.eventsTopic && Marshaler.NameFromMessage(msgs[0]) == Marshaler.Name(&InvoiceIssued{}) &&
		b.failures > 0 && b.calls%3 == 0 {
		b.failures--
		b.failed++
		b.mu.Unlock()
		return errors.New("connection reset by peer")
	}
	b.mu.Unlock()
	for range 1 + rand.IntN(3) {
		if err := b.Publisher.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, msg := range msgs {
		var body struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal(msg.Payload, &body)
		b.accepted = append(b.accepted, sent{topic, msg.UUID, Marshaler.NameFromMessage(msg), body.OrderID, msg.Copy()})
	}
	return nil
}

// uuidsByOrder returns, for messages of type name, the UUIDs the broker accepted per order.
func (b *flakyBroker) uuidsByOrder(name string) map[string]map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]map[string]bool{}
	for _, s := range b.accepted {
		if s.name != name {
			continue
		}
		if out[s.orderID] == nil {
			out[s.orderID] = map[string]bool{}
		}
		out[s.orderID][s.uuid] = true
	}
	return out
}

// deliveries watches what reaches each handler and drops the acks of some deliveries: the
// router gets a copy and acks it, the broker never hears of it, and once the copy is settled
// the original is nacked, so RabbitMQ delivers the message again as it would after a
// consumer died between its commit and its ack.
type deliveries struct {
	dropEvery int // drop the ack of every n-th delivery of IssueInvoice and Receipts, 0: none
	dropLimit int

	mu      sync.Mutex
	seen    map[string]int            // deliveries per handler
	byType  map[string]map[string]int // per handler, deliveries per message name
	settled map[string]int            // deliveries per handler the router acked
	orders  map[string]int            // IssueInvoice deliveries per order
	dropped []string                  // order IDs whose IssueInvoice or InvoiceIssued ack was dropped
	pending int                       // dropped originals not nacked yet
}

func newDeliveries(dropEvery, dropLimit int) *deliveries {
	return &deliveries{dropEvery: dropEvery, dropLimit: dropLimit, seen: map[string]int{},
		byType: map[string]map[string]int{}, settled: map[string]int{}, orders: map[string]int{}}
}

func (d *deliveries) wrap(handler string, sub message.Subscriber) message.Subscriber {
	return &watchedSubscriber{Subscriber: sub, handler: handler, d: d}
}

type watchedSubscriber struct {
	message.Subscriber
	handler string
	d       *deliveries
}

func (s *watchedSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			drop := s.d.see(s.handler, msg)
			forward := msg
			if drop {
				forward = msg.Copy()
				forward.SetContext(msg.Context())
			}
			select {
			case out <- forward:
			case <-ctx.Done():
				return
			}
			go func() {
				select {
				case <-forward.Acked():
					s.d.mu.Lock()
					s.d.settled[s.handler]++
					s.d.mu.Unlock()
				case <-forward.Nacked():
				case <-ctx.Done():
				}
				if drop {
					msg.Nack()
					s.d.mu.Lock()
					s.d.pending--
					s.d.mu.Unlock()
				}
			}()
		}
	}()
	return out, nil
}

func (d *deliveries) see(handler string, msg *message.Message) (drop bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[handler]++
	name := Marshaler.NameFromMessage(msg)
	if d.byType[handler] == nil {
		d.byType[handler] = map[string]int{}
	}
	d.byType[handler][name]++
	var body struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(msg.Payload, &body)
	if handler == IssueInvoiceHandler {
		d.orders[body.OrderID]++
	}
	if d.dropEvery == 0 || len(d.dropped) >= d.dropLimit || d.seen[handler]%d.dropEvery != 0 {
		return false
	}
	if handler == IssueInvoiceHandler || (handler == ReceiptsHandler && name == Marshaler.Name(&InvoiceIssued{})) {
		d.dropped = append(d.dropped, body.OrderID)
		d.pending++
		return true
	}
	return false
}

func (d *deliveries) settling() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

func (d *deliveries) settledBy(handler string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled[handler]
}

// startApp builds an App on RabbitMQ and PostgreSQL, runs its router until the test ends and
// removes its tables, queues and exchanges.
func startApp(t *testing.T, o Options) *App {
	t.Helper()
	o.AMQPURL = testenv.AMQPURL(t)
	if o.Pool == nil {
		o.Pool = e2e.Pool(t)
	}
	app, err := NewApp(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := app.DeleteTopology(); err != nil {
			t.Errorf("delete queues and exchanges: %v", err)
		}
		if err := app.DropTables(context.Background()); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := app.Router.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = app.Router.Close()
		cancel()
		<-done
	})
	<-app.Router.Running()
	return app
}

func (a *App) count(t *testing.T, table, orderID string) int {
	t.Helper()
	n, err := a.Count(context.Background(), table, orderID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (a *App) claims(t *testing.T, consumer string) int {
	t.Helper()
	var n int
	if err := a.opts.Pool.QueryRow(context.Background(), "SELECT COUNT(*) FROM "+a.Tables.Inbox+" WHERE consumer = $1",
		consumer).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queuesEmpty reports whether no queue of the App has a message ready.
func (a *App) queuesEmpty(t *testing.T) bool {
	t.Helper()
	conn, err := amqp091.Dial(a.opts.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range a.Queues() {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect queue %s: %v", q, err)
		}
		if info.Messages > 0 {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCQRS: 60 orders through IssueInvoice -> InvoiceIssued -> Receipts -> SendReceipt on
// RabbitMQ, every message sent 1-3 times; IssueInvoice fails after publishing on the first
// run of every third order and on the first two runs of every fifth (Retry runs it again in a
// fresh transaction); the broker fails a third of the event publishes for a
// while; and the acks of some deliveries are dropped. OrderShipped events share the events
// topic. Then: one invoice, one receipt and one e-mail per order; every order's
// InvoiceIssued and SendReceipt each under one UUID, whatever was redelivered; the receipt
// records that UUID; one shipment per shipped order; and the inbox holds claims only for the
// events each handler handles.
func TestCQRS(t *testing.T) {
	const orders = 60
	broker := &flakyBroker{failures: 12}
	watch := newDeliveries(7, 8)
	app := startApp(t, Options{
		WrapPublisher:  func(p message.Publisher) message.Publisher { broker.Publisher = p; return broker },
		WrapSubscriber: watch.wrap,
		FailAfterPublish: func(orderID string, run int) bool {
			var i int
			_, _ = fmt.Sscanf(orderID, "order-%d", &i)
			return (i%3 == 0 && run == 1) || (i%5 == 0 && run <= 2)
		},
	})
	broker.mu.Lock()
	broker.eventsTopic = app.Topics.Events
	broker.mu.Unlock()

	shipped := sendEveryThirdShipped(t, app, orders)
	waitFor(t, "every receipt e-mailed and every queue drained", func() bool {
		return app.count(t, app.Tables.Emails, "") >= orders && watch.settling() == 0 && app.queuesEmpty(t)
	})
	if err := app.Router.Close(); err != nil {
		t.Fatal(err)
	}
	checkOneEffectPerOrder(t, app, broker, orders)
	checkClaimsOfHandledEventsOnly(t, app, watch, orders, shipped)
	checkFaultsInjected(t, app, broker, watch, orders)
}

// sendEveryThirdShipped sends IssueInvoice for every order and OrderShipped for every third,
// and returns how many orders shipped.
func sendEveryThirdShipped(t *testing.T, app *App, orders int) (shipped int) {
	t.Helper()
	ctx := context.Background()
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		if err := app.CommandBus.Send(inbox.WithPublishNow(ctx), &IssueInvoice{OrderID: order, AmountCents: int64(100 + i)}); err != nil {
			t.Fatal(err)
		}
		if shipsEveryThird(i) {
			shipped++
			if err := app.EventBus.Publish(inbox.WithPublishNow(ctx), &OrderShipped{OrderID: order}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return shipped
}

// shipsEveryThird says whether TestCQRS ships order number i.
func shipsEveryThird(i int) bool { return i%3 == 1 }

// checkOneEffectPerOrder asserts one invoice, one receipt and one e-mail per order, and one
// shipment per shipped order; every order's InvoiceIssued and SendReceipt each under one
// UUID, whatever was redelivered; and the receipt recording that UUID.
func checkOneEffectPerOrder(t *testing.T, app *App, broker *flakyBroker, orders int) {
	t.Helper()
	invoiceIssued := broker.uuidsByOrder(Marshaler.Name(&InvoiceIssued{}))
	sendReceipt := broker.uuidsByOrder(Marshaler.Name(&SendReceipt{}))
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		for _, table := range []string{app.Tables.Invoices, app.Tables.Receipts, app.Tables.Emails} {
			if n := app.count(t, table, order); n != 1 {
				t.Errorf("%s: %d rows in %s, want 1", order, n, table)
			}
		}
		wantShipments := 0
		if shipsEveryThird(i) {
			wantShipments = 1
		}
		if n := app.count(t, app.Tables.Shipments, order); n != wantShipments {
			t.Errorf("%s: %d rows in %s, want %d", order, n, app.Tables.Shipments, wantShipments)
		}
		if len(invoiceIssued[order]) != 1 || len(sendReceipt[order]) != 1 {
			t.Errorf("%s: InvoiceIssued published under %d UUIDs, SendReceipt under %d; want one each",
				order, len(invoiceIssued[order]), len(sendReceipt[order]))
			continue
		}
		for uuid := range invoiceIssued[order] {
			var got string
			if err := app.opts.Pool.QueryRow(context.Background(), "SELECT event_uuid FROM "+app.Tables.Receipts+" WHERE order_id = $1",
				order).Scan(&got); err != nil || got != uuid {
				t.Errorf("%s: receipt for event %q (%v), want %q", order, got, err, uuid)
			}
		}
	}
}

// checkClaimsOfHandledEventsOnly asserts claims only for what each handler handles, though
// both event handlers got every event.
func checkClaimsOfHandledEventsOnly(t *testing.T, app *App, watch *deliveries, orders, shipped int) {
	t.Helper()
	for consumer, want := range map[string]int{IssueInvoiceHandler: orders, ReceiptsHandler: orders, SendReceiptHandler: orders, ShippingHandler: shipped} {
		if n := app.claims(t, consumer); n != want {
			t.Errorf("claims of %s: %d, want %d", consumer, n, want)
		}
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if n := watch.byType[ReceiptsHandler][Marshaler.Name(&OrderShipped{})]; n < shipped {
		t.Errorf("the receipts handler got %d OrderShipped deliveries, want at least %d: Skip not exercised", n, shipped)
	}
	if n := watch.byType[ShippingHandler][Marshaler.Name(&InvoiceIssued{})]; n < orders {
		t.Errorf("the shipping handler got %d InvoiceIssued deliveries, want at least %d: Skip not exercised", n, orders)
	}
}

// checkFaultsInjected asserts that the faults happened: failed runs, failed publishes, and
// dropped acks whose commands were delivered again.
func checkFaultsInjected(t *testing.T, app *App, broker *flakyBroker, watch *deliveries, orders int) {
	t.Helper()
	watch.mu.Lock()
	redelivered := 0
	for _, order := range watch.dropped {
		if watch.orders[order] > 1 {
			redelivered++
		}
	}
	dropped := len(watch.dropped)
	watch.mu.Unlock()
	failedRuns := app.failedRuns()
	broker.mu.Lock()
	failedPublishes := broker.failed
	broker.mu.Unlock()
	t.Logf("%d orders: %d failed IssueInvoice runs, %d failed event publishes, %d acks dropped",
		orders, failedRuns, failedPublishes, dropped)
	if failedRuns < orders/3 || failedPublishes == 0 || dropped == 0 || redelivered == 0 {
		t.Errorf("faults not injected: %d failed runs, %d failed publishes, %d acks dropped (%d IssueInvoice redelivered)",
			failedRuns, failedPublishes, dropped, redelivered)
	}
}

// Why Skip: without it, each event handler on the shared topic claims the events of the
// type it does not handle too (cqrs acks them inside the inbox).
func TestSharedTopicWithoutSkipClaimsEveryEvent(t *testing.T) {
	const orders, shipped = 6, 4
	app := startApp(t, Options{NoSkip: true})
	ctx := context.Background()
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		if err := app.CommandBus.Send(inbox.WithPublishNow(ctx), &IssueInvoice{OrderID: order}); err != nil {
			t.Fatal(err)
		}
		if i < shipped {
			if err := app.EventBus.Publish(inbox.WithPublishNow(ctx), &OrderShipped{OrderID: order}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "every event claimed by both event handlers", func() bool {
		return app.claims(t, ReceiptsHandler) >= orders+shipped && app.claims(t, ShippingHandler) >= orders+shipped
	})
	if err := app.Router.Close(); err != nil {
		t.Fatal(err)
	}
	for _, consumer := range []string{ReceiptsHandler, ShippingHandler} {
		if n := app.claims(t, consumer); n != orders+shipped {
			t.Errorf("claims of %s without Skip: %d, want %d (every event on the topic)", consumer, n, orders+shipped)
		}
	}
	if n := app.count(t, app.Tables.Receipts, ""); n != orders {
		t.Errorf("%d receipts, want %d", n, orders)
	}
}

// A handler renamed between deploys keeps its claims when Options.RenamedHandlers maps its
// new name to its consumer; without the entry its messages are refused (poisoned with
// inbox.ErrNoConsumer) before any claim, never processed again under the new name.
func TestRenamedHandler(t *testing.T) {
	for _, c := range []struct {
		name     string
		mapped   bool
		poisoned bool
	}{
		{"mapped to its consumer", true, false},
		{"not mapped", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const orders = 10
			pool := e2e.Pool(t)
			broker := &flakyBroker{}
			first := invoiceUnderFirstName(t, pool, broker, orders)

			// The same database and topics, the handler renamed; the commands come again.
			o := Options{Pool: pool, Prefix: strings.TrimSuffix(first.Tables.Inbox, "_inbox"), IssueInvoiceHandlerName: "IssueInvoiceV2"}
			if c.mapped {
				o.RenamedHandlers = map[string]string{"IssueInvoiceV2": Consumers[IssueInvoiceHandler]}
			}
			watch := newDeliveries(0, 0)
			o.WrapSubscriber = watch.wrap
			renamed := startApp(t, o)
			commands := publishAgain(t, broker, first.Topics.IssueInvoice)
			waitFor(t, "every command acked by the renamed handler", func() bool {
				return watch.settledBy("IssueInvoiceV2") >= commands && renamed.queuesEmpty(t)
			})
			wantPoisoned := 0
			if c.poisoned {
				wantPoisoned = commands
			}
			checkRenamed(t, renamed, orders, wantPoisoned)
		})
	}
}

// invoiceUnderFirstName runs an App whose IssueInvoice handler has its first name until
// every order is e-mailed, and returns it, closed.
func invoiceUnderFirstName(t *testing.T, pool *pgxpool.Pool, broker *flakyBroker, orders int) *App {
	t.Helper()
	wrap := func(p message.Publisher) message.Publisher { broker.Publisher = p; return broker }
	first := startApp(t, Options{Pool: pool, WrapPublisher: wrap})
	for i := range orders {
		if err := first.CommandBus.Send(inbox.WithPublishNow(context.Background()), &IssueInvoice{OrderID: fmt.Sprintf("order-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every order e-mailed", func() bool { return first.count(t, first.Tables.Emails, "") == orders && first.queuesEmpty(t) })
	if err := first.Router.Close(); err != nil {
		t.Fatal(err)
	}
	return first
}

// publishAgain publishes, straight to RabbitMQ, the messages the broker accepted for topic,
// and returns how many.
func publishAgain(t *testing.T, broker *flakyBroker, topic string) int {
	t.Helper()
	rabbit, err := amqp.NewPublisher(amqp.NewDurablePubSubConfig(testenv.AMQPURL(t), nil), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer rabbit.Close()
	broker.mu.Lock()
	var msgs []*message.Message
	for _, s := range broker.accepted {
		if s.topic == topic {
			msgs = append(msgs, s.msg)
		}
	}
	broker.mu.Unlock()
	if err := rabbit.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	return len(msgs)
}

// checkRenamed asserts one invoice per order, no claim under the new name, and wantPoisoned
// commands poisoned, each for inbox.ErrNoConsumer naming the new name.
func checkRenamed(t *testing.T, renamed *App, orders, wantPoisoned int) {
	t.Helper()
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		if n := renamed.count(t, renamed.Tables.Invoices, order); n != 1 {
			t.Errorf("%s: %d invoices, want 1", order, n)
		}
	}
	if n := renamed.claims(t, "IssueInvoiceV2"); n != 0 {
		t.Errorf("claims under the new name IssueInvoiceV2: %d, want 0", n)
	}
	if n := renamed.Poisoned.Count(); n != wantPoisoned {
		t.Errorf("poisoned %d commands, want %d (reasons: %v)", n, wantPoisoned, renamed.Poisoned.Reasons())
	}
	for _, reason := range renamed.Poisoned.Reasons() {
		if !strings.Contains(reason, inbox.ErrNoConsumer.Error()) || !strings.Contains(reason, "IssueInvoiceV2") {
			t.Errorf("poisoned because %q, want inbox.ErrNoConsumer naming IssueInvoiceV2", reason)
		}
	}
}

func TestPublishErrorsInsideAClaim(t *testing.T) {
	pool := e2e.Pool(t)
	rejecting := &rejectingPublisher{reject: "no.such.topic"}
	app := startApp(t, Options{Pool: pool, WrapPublisher: func(p message.Publisher) message.Publisher {
		rejecting.Publisher = p
		return rejecting
	}})
	runs := 0
	publish := func(topic, uuid string) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			runs++
			tx, err := tx(msg.Context())
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(msg.Context(), "INSERT INTO "+app.Tables.Invoices+" (order_id, amount_cents) VALUES ($1, 1)", msg.UUID); err != nil {
				return nil, err
			}
			out := message.NewMessage(uuid, []byte(`{}`))
			out.SetContext(msg.Context())
			return nil, app.Publisher.Publish(topic, out)
		}
	}
	// The inbox middleware called directly, as the router would, with the App's Publisher.
	mw, err := inbox.NewMiddleware(app.Store, inbox.Config{Consumer: "billing", Publisher: app.Publisher}, nil)
	if err != nil {
		t.Fatal(err)
	}

	deliver := func(h message.HandlerFunc, key string) error {
		_, err := mw(h)(message.NewMessage(key, []byte(`{}`)))
		return err
	}

	if err := deliver(publish(app.Topics.Events, ""), "order-empty"); err == nil || !strings.Contains(err.Error(), "empty UUID") {
		t.Errorf("a message without a UUID: err = %v, want the refusal of an empty UUID", err)
	}
	if n := app.count(t, app.Tables.Invoices, "order-empty"); n != 0 {
		t.Errorf("a message without a UUID: %d invoices committed, want 0", n)
	}

	runs = 0
	h := publish("no.such.topic", "event-1")
	for attempt := range 3 {
		err := deliver(h, "order-rejected")
		if !errors.Is(err, errRejected) || !strings.Contains(err.Error(), "no.such.topic") {
			t.Errorf("delivery %d to a rejected topic: err = %v, want the broker's rejection naming the topic", attempt+1, err)
		}
	}
	rejecting.accept()
	if err := deliver(h, "order-rejected"); err != nil {
		t.Errorf("after the broker accepts the topic: %v", err)
	}
	if n := app.count(t, app.Tables.Invoices, "order-rejected"); n != 1 || runs != 1 {
		t.Errorf("%d invoices, handler ran %d times; want 1 and 1", n, runs)
	}
	if got := rejecting.acceptedUUIDs("no.such.topic"); len(got) != 1 || got[0] != "event-1" {
		t.Errorf("published to the topic at last: %v, want [event-1]", got)
	}
}

var errRejected = errors.New("NOT_FOUND - no exchange")

// rejectingPublisher refuses one topic, as a broker without that exchange does, until
// accept is called.
type rejectingPublisher struct {
	message.Publisher
	reject string

	mu       sync.Mutex
	accepted map[string][]string
	open     bool
}

func (p *rejectingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if topic == p.reject {
		if !p.open {
			return fmt.Errorf("publish to %q: %w", topic, errRejected)
		}
		if p.accepted == nil {
			p.accepted = map[string][]string{}
		}
		for _, msg := range msgs {
			p.accepted[topic] = append(p.accepted[topic], msg.UUID)
		}
		return nil
	}
	return p.Publisher.Publish(topic, msgs...)
}

func (p *rejectingPublisher) accept() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = true
}

func (p *rejectingPublisher) acceptedUUIDs(topic string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.accepted[topic]...)
}

// TestCQRSProgram runs the program as .ci/run does, with few orders: every command has
// exactly one effect though messages are copied and some runs and publishes fail (run fails
// otherwise).
func TestCQRSProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.AMQPURL(t), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

// Command cqrs runs components/cqrs handlers behind the inbox, on RabbitMQ and PostgreSQL.
//
// A command handler writes an invoice through the inbox transaction and publishes
// InvoiceIssued through an EventBus; an event handler writes a receipt and sends a
// SendReceipt command through a CommandBus; a command handler writes the e-mail row. Both
// buses are built on one inbox.Publisher, so what a handler publishes is recorded with its
// claim and leaves only after the claim commits, under the same UUID on every redelivery.
// All events share one topic: Config.Skip keeps each event handler from claiming the types
// it does not handle.
//
// The program sends every message 1-3 times, fails the first run of some IssueInvoice
// handlers after they published and some publishes of InvoiceIssued, then prints a verdict
// and exits non-zero unless every command had exactly one effect.
//
//	go run ./examples/cqrs [-amqp URL] [-postgres URL] [-orders N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	amqpURL := flag.String("amqp", demo.AMQPURL, demo.FlagHelp("RabbitMQ URL", "INBOX_TEST_AMQP_URL"))
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 100, "orders to invoice")
	flag.Parse()
	if err := run(context.Background(), *amqpURL, *postgres, *orders, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cqrs:", err)
		os.Exit(1)
	}
}

// IssueInvoice is the command that starts it all.
type IssueInvoice struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// InvoiceIssued is published by the IssueInvoice handler.
type InvoiceIssued struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// SendReceipt is sent by the receipts handler for every InvoiceIssued.
type SendReceipt struct {
	OrderID string `json:"order_id"`
}

// OrderShipped is another event on the shared events topic, which the receipts handler
// does not handle.
type OrderShipped struct {
	OrderID string `json:"order_id"`
}

// Handler names. Each handler is a consumer of its own (Consumers): every handler of a
// topic must see every message of it.
const (
	IssueInvoiceHandler = "IssueInvoice"
	ReceiptsHandler     = "Receipts"
	SendReceiptHandler  = "SendReceipt"
	ShippingHandler     = "Shipping"
)

// Options configures an App. The zero value of every field but AMQPURL and Pool is usable.
type Options struct {
	AMQPURL string
	Pool    *pgxpool.Pool
	// Prefix names the tables, topics and queues; Default: a random one.
	Prefix string
	// WrapPublisher wraps the RabbitMQ publisher that the inbox.Publisher publishes through.
	WrapPublisher func(message.Publisher) message.Publisher
	// WrapSubscriber wraps the RabbitMQ subscriber of the handler named handlerName.
	WrapSubscriber func(handlerName string, sub message.Subscriber) message.Subscriber
	// FailAfterPublish, if it returns true, makes that run of the IssueInvoice handler fail
	// after it wrote the invoice and published InvoiceIssued. run counts from 1 per order.
	FailAfterPublish func(orderID string, run int) bool
	// IssueInvoiceHandlerName renames the IssueInvoice handler. Default: IssueInvoiceHandler.
	IssueInvoiceHandlerName string
	// RenamedHandlers maps the new name of a renamed handler to the consumer it had, on top
	// of Consumers; a handler in neither is refused by the inbox.
	RenamedHandlers map[string]string
	// NoSkip leaves inbox.Config.Skip unset: every event handler claims every event.
	NoSkip bool
}

// App is a router with the four handlers, the inbox and both buses.
type App struct {
	Router     *message.Router
	CommandBus *cqrs.CommandBus
	EventBus   *cqrs.EventBus
	Publisher  *inbox.Publisher
	Tables     Tables
	Topics     Topics
	// Store is the inbox's store.
	Store *sqlinbox.PgxStore
	// Poisoned holds the messages the poison queue took.
	Poisoned *demo.Held

	opts Options
	mu   sync.Mutex
	runs map[string]int // IssueInvoice runs per order

	inFlight atomic.Int64 // deliveries begun and not yet done
}

// Tables are the App's tables.
type Tables struct{ Inbox, Invoices, Receipts, Emails string }

// Topics are the App's topics: one per command, one for every event.
type Topics struct{ IssueInvoice, SendReceipt, Events string }

// Consumers maps each handler to its inbox consumer, written out: a renamed handler keeps
// its claims by an entry for its new name (Options.RenamedHandlers), and one without an entry
// is refused instead of processing every message again under a new name.
var Consumers = map[string]string{
	IssueInvoiceHandler: "IssueInvoice",
	ReceiptsHandler:     "Receipts",
	SendReceiptHandler:  "SendReceipt",
	ShippingHandler:     "Shipping",
}

// Marshaler names messages by their struct's name, in the "name" metadata.
var Marshaler = cqrs.JSONMarshaler{GenerateName: cqrs.StructName}

// NewApp creates the tables and the router. Run the router, and wait for Router.Running,
// before sending: RabbitMQ drops what is published to an exchange no queue is bound to yet.
func NewApp(ctx context.Context, o Options) (*App, error) {
	if o.Prefix == "" {
		o.Prefix = testenv.Name("cqrs")
	}
	if o.IssueInvoiceHandlerName == "" {
		o.IssueInvoiceHandlerName = IssueInvoiceHandler
	}
	a := &App{
		opts: o, runs: map[string]int{},
		Tables: Tables{Inbox: o.Prefix + "_inbox", Invoices: o.Prefix + "_invoices", Receipts: o.Prefix + "_receipts", Emails: o.Prefix + "_emails"},
		Topics: Topics{IssueInvoice: o.Prefix + ".IssueInvoice", SendReceipt: o.Prefix + ".SendReceipt", Events: o.Prefix + ".events"},
	}
	for _, ddl := range []string{
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Invoices + " (order_id text NOT NULL, amount_cents bigint NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Receipts + " (order_id text NOT NULL, event_uuid text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Emails + " (order_id text NOT NULL)",
	} {
		if _, err := o.Pool.Exec(ctx, ddl); err != nil {
			return nil, err
		}
	}
	store, err := sqlinbox.NewPgx(o.Pool, sqlinbox.Config{Table: a.Tables.Inbox})
	if err != nil {
		return nil, err
	}
	a.Store = store
	if err := store.InitializeSchema(ctx); err != nil {
		return nil, err
	}

	// One publisher for commands and events: a fanout exchange per topic, a durable queue per
	// topic and handler, so every handler of a topic gets every message, and the instances of
	// one handler compete for them.
	logger := watermill.NopLogger{}
	var rabbit message.Publisher
	rabbit, err = amqp.NewPublisher(amqp.NewDurablePubSubConfig(o.AMQPURL, nil), logger)
	if err != nil {
		return nil, err
	}
	if o.WrapPublisher != nil {
		rabbit = o.WrapPublisher(rabbit)
	}
	// The one inbox.Publisher of this inbox, shared by both buses.
	if a.Publisher, err = inbox.NewPublisher(rabbit); err != nil {
		return nil, err
	}
	if a.CommandBus, err = cqrs.NewCommandBusWithConfig(a.Publisher, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return o.Prefix + "." + p.CommandName, nil
		},
		Marshaler: Marshaler,
	}); err != nil {
		return nil, err
	}
	if a.EventBus, err = cqrs.NewEventBusWithConfig(a.Publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(cqrs.GenerateEventPublishTopicParams) (string, error) { return a.Topics.Events, nil },
		Marshaler:            Marshaler,
	}); err != nil {
		return nil, err
	}

	// Which event each event handler handles: every other type on the shared topic is acked
	// without a claim.
	handles := map[string]string{ReceiptsHandler: Marshaler.Name(&InvoiceIssued{}), ShippingHandler: Marshaler.Name(&OrderShipped{})}
	consumers := maps.Clone(Consumers)
	maps.Copy(consumers, o.RenamedHandlers)
	config := inbox.Config{
		Publisher: a.Publisher, // so a duplicate can republish before any handler published
		Skip: func(msg *message.Message) bool {
			want, ok := handles[message.HandlerNameFromCtx(msg.Context())]
			return ok && Marshaler.NameFromMessage(msg) != want
		},
		ConsumerFromHandler: inbox.ConsumerByHandler(consumers),
	}
	if o.NoSkip {
		config.Skip = nil
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, config, logger)
	if err != nil {
		return nil, err
	}
	// Poisoned messages are held in memory, so that a run leaves nothing on RabbitMQ; a
	// poisoned message fails the run's verdict.
	a.Poisoned = &demo.Held{}
	poisonQueue, err := middleware.PoisonQueue(a.Poisoned, o.Prefix+".poison")
	if err != nil {
		return nil, err
	}

	if a.Router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger); err != nil {
		return nil, err
	}
	// Not part of the stack: counts the deliveries in flight, so that a run closes the
	// router only when none is, and no copy is cancelled into the poison queue.
	a.Router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			a.inFlight.Add(1)
			defer a.inFlight.Add(-1)
			return h(msg)
		}
	})
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}
	a.Router.AddMiddleware(
		poisonQueue,                        // outermost: takes what every retry failed
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)

	subscriber := func(handlerName string) (message.Subscriber, error) {
		sub, err := amqp.NewSubscriber(amqp.NewDurablePubSubConfig(o.AMQPURL,
			amqp.GenerateQueueNameTopicNameWithSuffix(handlerName)), logger)
		if err != nil || o.WrapSubscriber == nil {
			return sub, err
		}
		return o.WrapSubscriber(handlerName, sub), nil
	}
	commands, err := cqrs.NewCommandProcessorWithConfig(a.Router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return o.Prefix + "." + p.CommandName, nil
		},
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return subscriber(p.HandlerName)
		},
		Marshaler: Marshaler,
	})
	if err != nil {
		return nil, err
	}
	if err := commands.AddHandlers(
		cqrs.NewCommandHandler(o.IssueInvoiceHandlerName, a.issueInvoice),
		cqrs.NewCommandHandler(SendReceiptHandler, a.sendReceipt),
	); err != nil {
		return nil, err
	}
	events, err := cqrs.NewEventProcessorWithConfig(a.Router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return a.Topics.Events, nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return subscriber(p.HandlerName)
		},
		AckOnUnknownEvent: true, // reached only without Skip
		Marshaler:         Marshaler,
	})
	if err != nil {
		return nil, err
	}
	if err := events.AddHandlers(
		cqrs.NewEventHandler(ReceiptsHandler, a.receipt),
		cqrs.NewEventHandler(ShippingHandler, func(context.Context, *OrderShipped) error { return nil }),
	); err != nil {
		return nil, err
	}
	return a, nil
}

// Queues returns the RabbitMQ queues the App declares, and Exchanges its exchanges.
func (a *App) Queues() []string {
	return []string{
		a.Topics.IssueInvoice + "_" + a.opts.IssueInvoiceHandlerName, a.Topics.SendReceipt + "_" + SendReceiptHandler,
		a.Topics.Events + "_" + ReceiptsHandler, a.Topics.Events + "_" + ShippingHandler,
	}
}

// Exchanges returns the RabbitMQ exchanges the App declares.
func (a *App) Exchanges() []string {
	return []string{a.Topics.IssueInvoice, a.Topics.SendReceipt, a.Topics.Events}
}

// DeleteTopology deletes the App's RabbitMQ queues and exchanges.
func (a *App) DeleteTopology() error {
	conn, err := amqp091.Dial(a.opts.AMQPURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, q := range a.Queues() {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	for _, x := range a.Exchanges() {
		errs = append(errs, ch.ExchangeDelete(x, false, false))
	}
	return errors.Join(errs...)
}

// QueuesEmpty reports whether no queue of the App has a message ready for a consumer.
func (a *App) QueuesEmpty() (bool, error) {
	conn, err := amqp091.Dial(a.opts.AMQPURL)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	for _, q := range a.Queues() {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return false, fmt.Errorf("inspect queue %s: %w", q, err)
		}
		if info.Messages > 0 {
			return false, nil
		}
	}
	return true, nil
}

// DropTables drops the App's tables.
func (a *App) DropTables(ctx context.Context) error {
	var errs []error
	for _, table := range []string{a.Tables.Inbox, a.Tables.Invoices, a.Tables.Receipts, a.Tables.Emails} {
		if _, err := a.opts.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tx is the inbox transaction of a handler's context.
func tx(ctx context.Context) (pgx.Tx, error) {
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return nil, errors.New("no inbox transaction in the handler's context")
	}
	return tx, nil
}

// issueInvoice writes the invoice and publishes InvoiceIssued, both recorded with the claim.
func (a *App) issueInvoice(ctx context.Context, cmd *IssueInvoice) error {
	tx, err := tx(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+a.Tables.Invoices+" (order_id, amount_cents) VALUES ($1, $2)",
		cmd.OrderID, cmd.AmountCents); err != nil {
		return err
	}
	if err := a.EventBus.Publish(ctx, &InvoiceIssued{OrderID: cmd.OrderID, AmountCents: cmd.AmountCents}); err != nil {
		return err
	}
	a.mu.Lock()
	a.runs[cmd.OrderID]++
	run := a.runs[cmd.OrderID]
	a.mu.Unlock()
	if a.opts.FailAfterPublish != nil && a.opts.FailAfterPublish(cmd.OrderID, run) {
		return fmt.Errorf("issue invoice for %s: mailer timed out after publishing", cmd.OrderID)
	}
	return nil
}

// receipt writes the receipt, with the UUID of the event it came from, and sends SendReceipt.
func (a *App) receipt(ctx context.Context, event *InvoiceIssued) error {
	tx, err := tx(ctx)
	if err != nil {
		return err
	}
	msg := cqrs.OriginalMessageFromCtx(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO "+a.Tables.Receipts+" (order_id, event_uuid) VALUES ($1, $2)",
		event.OrderID, msg.UUID); err != nil {
		return err
	}
	return a.CommandBus.Send(ctx, &SendReceipt{OrderID: event.OrderID})
}

func (a *App) sendReceipt(ctx context.Context, cmd *SendReceipt) error {
	tx, err := tx(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+a.Tables.Emails+" (order_id) VALUES ($1)", cmd.OrderID)
	return err
}

// Count returns the rows of table, of one order if orderID is not empty.
func (a *App) Count(ctx context.Context, table, orderID string) (n int, err error) {
	query, args := "SELECT COUNT(*) FROM "+table, []any{}
	if orderID != "" {
		query, args = query+" WHERE order_id = $1", append(args, orderID)
	}
	err = a.opts.Pool.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// run invoices orders the way an at-least-once broker and a flaky network treat them: every
// message is sent 1-3 times (copies under one UUID), the IssueInvoice handler of every fifth
// order fails after it published, on its first run, and some publishes of InvoiceIssued
// fail. Every other order is shipped too. It then prints what the tables hold and a verdict,
// and returns an error unless every command had exactly one effect.
func run(ctx context.Context, amqpURL, postgres string, orders int, out io.Writer) error {
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	broker := &copyingBroker{failEvery: 4, failures: orders / 10}
	app, err := NewApp(ctx, Options{AMQPURL: amqpURL, Pool: pool,
		WrapPublisher:    func(p message.Publisher) message.Publisher { broker.Publisher = p; return broker },
		FailAfterPublish: func(orderID string, run int) bool { return run == 1 && strings.HasSuffix(orderID, "5") }})
	if err != nil {
		return err
	}
	broker.failTopic = app.Topics.Events
	defer func() {
		_ = app.DropTables(context.WithoutCancel(ctx))
		_ = app.DeleteTopology()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Router.Run(ctx) }()
	<-app.Router.Running()

	// Not a handler: inbox.PublishNow has the buses publish at once.
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		if err := app.CommandBus.Send(inbox.PublishNow(ctx), &IssueInvoice{OrderID: order, AmountCents: int64(100 + i)}); err != nil {
			return err
		}
		if i%2 == 0 {
			if err := app.EventBus.Publish(inbox.PublishNow(ctx), &OrderShipped{OrderID: order}); err != nil {
				return err
			}
		}
	}
	// Every receipt e-mailed, no message left waiting in a queue and none in a handler: the
	// copies are through.
	deadline := time.Now().Add(time.Minute)
	for {
		emails, err := app.Count(ctx, app.Tables.Emails, "")
		if err != nil {
			return err
		}
		empty, err := app.QueuesEmpty()
		if err != nil {
			return err
		}
		if emails >= orders && empty && app.inFlight.Load() == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d receipts e-mailed after a minute", emails, orders)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := app.Router.Close(); err != nil { // waits for the handlers still running
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	for _, table := range []string{app.Tables.Invoices, app.Tables.Receipts, app.Tables.Emails, app.Tables.Inbox} {
		n, err := app.Count(ctx, table, "")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%-40s %d rows\n", table, n)
	}

	// The verdict: one invoice, one receipt and one e-mail per order, nothing poisoned.
	var wrong []string
	for i := range orders {
		order := fmt.Sprintf("order-%04d", i)
		for _, table := range []string{app.Tables.Invoices, app.Tables.Receipts, app.Tables.Emails} {
			n, err := app.Count(ctx, table, order)
			if err != nil {
				return err
			}
			if n != 1 {
				wrong = append(wrong, fmt.Sprintf("%s: %d rows in %s", order, n, table))
			}
		}
	}
	if n := app.Poisoned.Count(); n > 0 {
		wrong = append(wrong, fmt.Sprintf("%d messages poisoned: %s", n, strings.Join(app.Poisoned.Reasons(), "; ")))
	}
	app.mu.Lock()
	failedRuns := 0
	for _, runs := range app.runs {
		failedRuns += runs - 1
	}
	app.mu.Unlock()
	sent, copies, failed := broker.counts()
	faults := fmt.Sprintf("%d messages sent %d times, %d IssueInvoice runs failed after publishing, %d publishes failed",
		sent, sent+copies, failedRuns, failed)
	if len(wrong) > 0 {
		return fmt.Errorf("not one effect per command (%s): %s", faults, strings.Join(wrong, "; "))
	}
	fmt.Fprintf(out, "verdict: every command had exactly one effect (%d orders; %s)\n", orders, faults)
	return nil
}

// copyingBroker is the publisher the inbox.Publisher publishes through, made to act as an
// at-least-once broker and a flaky network: every message it accepts is sent 1-3 times, and
// while failures last, every failEvery-th publish of InvoiceIssued to failTopic fails with
// nothing sent.
type copyingBroker struct {
	message.Publisher
	failTopic string
	failEvery int

	mu                            sync.Mutex
	calls, failures               int
	sent, copies, failedPublishes int
}

func (b *copyingBroker) Publish(topic string, msgs ...*message.Message) error {
	b.mu.Lock()
	b.calls++
	if topic == b.failTopic && Marshaler.NameFromMessage(msgs[0]) == Marshaler.Name(&InvoiceIssued{}) &&
		b.failures > 0 && b.calls%b.failEvery == 0 {
		b.failures--
		b.failedPublishes++
		b.mu.Unlock()
		return errors.New("connection reset by peer")
	}
	copies := rand.IntN(3)
	b.sent += len(msgs)
	b.copies += copies * len(msgs)
	b.mu.Unlock()
	for range 1 + copies {
		if err := b.Publisher.Publish(topic, msgs...); err != nil {
			return err
		}
	}
	return nil
}

func (b *copyingBroker) counts() (sent, copies, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent, b.copies, b.failedPublishes
}

// Command cqrs runs components/cqrs handlers behind the inbox, on RabbitMQ and PostgreSQL.
//
// A command handler writes an invoice through the inbox transaction and publishes
// InvoiceIssued through an EventBus; an event handler writes a receipt and sends a
// SendReceipt command through a CommandBus; a command handler writes the e-mail row; another
// event handler writes the shipment of an OrderShipped. Both buses are built on one
// inbox.Publisher, so what a handler publishes is recorded with its claim and leaves only
// after the claim commits, under the same UUID on every redelivery. All events share one
// topic: Config.Skip keeps each event handler from claiming the types it does not handle.
//
// The program sends every message 1-3 times, fails the first run of some IssueInvoice
// handlers after they published and some publishes of InvoiceIssued, then prints a verdict
// and exits non-zero unless every command had exactly one effect (demo.go).
//
//	go run ./examples/cqrs [-amqp URL] [-postgres URL] [-orders N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
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

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	amqpURL := flag.String("amqp", envOr("INBOX_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		"RabbitMQ URL (default $INBOX_TEST_AMQP_URL, or the shown value)")
	postgres := flag.String("postgres", envOr("INBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL (default $INBOX_TEST_POSTGRES_URL, or the shown value)")
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
// does not handle; the shipping handler writes the shipment.
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

// Options configures an App. The zero value of every field but AMQPURL and Pool is usable.
type Options struct {
	AMQPURL string
	Pool    *pgxpool.Pool
	// Prefix names the tables, topics and queues. Default: cqrs_<random>, new each time.
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
	Store *sqlinbox.Store
	// Poisoned holds the messages the poison queue took.
	Poisoned *Held

	opts Options
	mu   sync.Mutex
	runs map[string]int // IssueInvoice runs per order

	inFlight atomic.Int64 // deliveries begun and not yet done
}

// Tables are the App's tables.
type Tables struct{ Inbox, Invoices, Receipts, Emails, Shipments string }

// Topics are the App's topics: one per command, one for every event.
type Topics struct{ IssueInvoice, SendReceipt, Events string }

// NewApp creates the tables and the router. Run the router, and wait for Router.Running,
// before sending: RabbitMQ drops what is published to an exchange no queue is bound to yet.
func NewApp(ctx context.Context, o Options) (*App, error) {
	a := newApp(o)
	if err := a.createTables(ctx); err != nil {
		return nil, err
	}
	rabbit, err := a.rabbitPublisher()
	if err != nil {
		return nil, err
	}
	if err := a.newBuses(rabbit); err != nil {
		return nil, err
	}
	inboxMiddleware, err := a.newInboxMiddleware()
	if err != nil {
		return nil, err
	}
	if err := a.newRouter(inboxMiddleware); err != nil {
		return nil, err
	}
	if err := a.addHandlers(); err != nil {
		return nil, err
	}
	return a, nil
}

// newApp returns the App of o, its defaults filled in and its tables and topics named;
// nothing exists yet.
func newApp(o Options) *App {
	if o.Prefix == "" {
		o.Prefix = "cqrs_" + strconv.FormatUint(rand.Uint64(), 36)
	}
	if o.IssueInvoiceHandlerName == "" {
		o.IssueInvoiceHandlerName = IssueInvoiceHandler
	}
	return &App{
		opts: o, runs: map[string]int{},
		Tables: Tables{Inbox: o.Prefix + "_inbox", Invoices: o.Prefix + "_invoices", Receipts: o.Prefix + "_receipts",
			Emails: o.Prefix + "_emails", Shipments: o.Prefix + "_shipments"},
		Topics: Topics{IssueInvoice: o.Prefix + ".IssueInvoice", SendReceipt: o.Prefix + ".SendReceipt", Events: o.Prefix + ".events"},
	}
}

// createTables creates the tables the handlers write to, and the inbox table with its store.
func (a *App) createTables(ctx context.Context) error {
	for _, ddl := range []string{
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Invoices + " (order_id text NOT NULL, amount_cents bigint NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Receipts + " (order_id text NOT NULL, event_uuid text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Emails + " (order_id text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + a.Tables.Shipments + " (order_id text NOT NULL)",
	} {
		if _, err := a.opts.Pool.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	store, err := sqlinbox.NewPgx(a.opts.Pool, sqlinbox.Config{Table: a.Tables.Inbox})
	if err != nil {
		return err
	}
	a.Store = store
	if err := store.InitializeSchema(ctx); err != nil {
		return err
	}
	return store.CheckTable(ctx) // refuse to start on a table or a driver that cannot work
}

// rabbitPublisher returns the RabbitMQ publisher, as Options.WrapPublisher wraps it.
// RabbitMQ has a fanout exchange per topic and a durable queue per topic and handler, so
// every handler of a topic gets every message, and the instances of one handler compete
// for them.
func (a *App) rabbitPublisher() (message.Publisher, error) {
	var rabbit message.Publisher
	rabbit, err := amqp.NewPublisher(amqp.NewDurablePubSubConfig(a.opts.AMQPURL, nil), watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	if a.opts.WrapPublisher != nil {
		rabbit = a.opts.WrapPublisher(rabbit)
	}
	return rabbit, nil
}

// newBuses builds the one inbox.Publisher of this inbox, on broker, and both buses on it.
func (a *App) newBuses(broker message.Publisher) error {
	var err error
	if a.Publisher, err = inbox.NewPublisher(broker); err != nil {
		return err
	}
	if a.CommandBus, err = cqrs.NewCommandBusWithConfig(a.Publisher, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return a.opts.Prefix + "." + p.CommandName, nil
		},
		Marshaler: Marshaler,
	}); err != nil {
		return err
	}
	a.EventBus, err = cqrs.NewEventBusWithConfig(a.Publisher, cqrs.EventBusConfig{
		GeneratePublishTopic: func(cqrs.GenerateEventPublishTopicParams) (string, error) { return a.Topics.Events, nil },
		Marshaler:            Marshaler,
	})
	return err
}

// newInboxMiddleware returns the inbox: a consumer per handler, and Skip for the event
// types an event handler does not handle, which it acks without a claim.
func (a *App) newInboxMiddleware() (message.HandlerMiddleware, error) {
	handles := map[string]string{ReceiptsHandler: Marshaler.Name(&InvoiceIssued{}), ShippingHandler: Marshaler.Name(&OrderShipped{})}
	consumers := maps.Clone(Consumers)
	maps.Copy(consumers, a.opts.RenamedHandlers)
	config := inbox.Config{
		Publisher: a.Publisher, // so a duplicate can republish before any handler published
		Skip: func(msg *message.Message) bool {
			want, ok := handles[message.HandlerNameFromCtx(msg.Context())]
			return ok && Marshaler.NameFromMessage(msg) != want
		},
		ConsumerByHandler: consumers,
	}
	if a.opts.NoSkip {
		config.Skip = nil
	}
	return inbox.NewMiddleware(a.Store, config, watermill.NopLogger{})
}

// newRouter builds the router with the recommended middleware stack. Poisoned messages are
// held in memory, so that a run leaves nothing on RabbitMQ; a poisoned message fails the
// run's verdict.
func (a *App) newRouter(inboxMiddleware message.HandlerMiddleware) error {
	a.Poisoned = &Held{}
	logger := watermill.NewStdLogger(false, false) // the retried and the poisoned failures, to stderr
	poisonQueue, err := middleware.PoisonQueueWithFilter(a.Poisoned, a.opts.Prefix+".poison", inbox.Poisonous)
	if err != nil {
		return err
	}
	if a.Router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{}); err != nil {
		return err
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
	retry := middleware.Retry{
		MaxRetries:      math.MaxInt32, // no count: inbox.ShouldRetry decides when to stop
		InitialInterval: 50 * time.Millisecond,
		Multiplier:      1.5,
		MaxInterval:     2 * time.Second,              // a database that is away is tried every 2 s
		ShouldRetry:     inbox.ShouldRetry(3, logger), // the message's own failure: 3 retries, then the poison queue
		Logger:          logger,                       // logs each failure it retries
	}
	a.Router.AddMiddleware(
		poisonQueue,                        // outermost: takes the message's own failures, not the database's
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)
	return nil
}

// addHandlers adds the command and event handlers to the router, each on a RabbitMQ queue
// of its own.
func (a *App) addHandlers() error {
	commands, err := cqrs.NewCommandProcessorWithConfig(a.Router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return a.opts.Prefix + "." + p.CommandName, nil
		},
		SubscriberConstructor: func(p cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return a.subscriber(p.HandlerName)
		},
		Marshaler: Marshaler,
	})
	if err != nil {
		return err
	}
	if err := commands.AddHandlers(
		cqrs.NewCommandHandler(a.opts.IssueInvoiceHandlerName, a.issueInvoice),
		cqrs.NewCommandHandler(SendReceiptHandler, a.sendReceipt),
	); err != nil {
		return err
	}
	events, err := cqrs.NewEventProcessorWithConfig(a.Router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return a.Topics.Events, nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return a.subscriber(p.HandlerName)
		},
		AckOnUnknownEvent: true, // reached only without Skip
		Marshaler:         Marshaler,
	})
	if err != nil {
		return err
	}
	return events.AddHandlers(
		cqrs.NewEventHandler(ReceiptsHandler, a.receipt),
		cqrs.NewEventHandler(ShippingHandler, a.ship),
	)
}

// subscriber returns the RabbitMQ subscriber of a handler: its own durable queue, bound to
// the topic's exchange.
func (a *App) subscriber(handlerName string) (message.Subscriber, error) {
	sub, err := amqp.NewSubscriber(amqp.NewDurablePubSubConfig(a.opts.AMQPURL,
		amqp.GenerateQueueNameTopicNameWithSuffix(handlerName)), watermill.NopLogger{})
	if err != nil || a.opts.WrapSubscriber == nil {
		return sub, err
	}
	return a.opts.WrapSubscriber(handlerName, sub), nil
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

// ship writes the shipment of the order.
func (a *App) ship(ctx context.Context, event *OrderShipped) error {
	tx, err := tx(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+a.Tables.Shipments+" (order_id) VALUES ($1)", event.OrderID)
	return err
}

// failedRuns counts the runs of the IssueInvoice handler beyond the first of each order.
func (a *App) failedRuns() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, runs := range a.runs {
		n += runs - 1
	}
	return n
}

// Held is a message.Publisher that keeps what is published to it in memory: the poison
// queue of a program that must leave nothing on its broker.
type Held struct {
	mu   sync.Mutex
	msgs []*message.Message
}

// Publish keeps msgs.
func (h *Held) Publish(_ string, msgs ...*message.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgs...)
	return nil
}

// Close does nothing.
func (h *Held) Close() error { return nil }

// Count returns how many messages were published to h.
func (h *Held) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// Reasons returns the distinct reasons the poison queue recorded on the messages, in the
// order first seen.
func (h *Held) Reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var reasons []string
	for _, msg := range h.msgs {
		if r := msg.Metadata.Get(middleware.ReasonForPoisonedKey); !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	return reasons
}

// envOr returns the environment variable's value, or fallback when it is unset: the
// program finds its services where the repository's tests do.
func envOr(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

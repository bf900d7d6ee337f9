// Command outbox runs the billing handler behind the inbox with a transactional outbox, the
// Watermill way: the handler writes the invoice and its InvoiceCreated event in the inbox
// transaction (the event through watermill-sql's publisher, wrapped by the forwarder's
// envelope), and Watermill's forwarder relays the events from PostgreSQL to the destination
// pub/sub. The invoice, the inbox claim and the event commit together or not at all; the
// handler returns no messages.
//
//	go run ./examples/outbox -postgres postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL, for the inbox, the invoices and the outbox", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(context.Background(), *postgres, *orders, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// EventsTopic is the destination topic of the InvoiceCreated events.
const EventsTopic = "invoices"

// InvoiceCreated is the event the handler publishes, through the outbox, for every invoice.
type InvoiceCreated struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Outbox is the forwarder's topic on PostgreSQL: the table watermill_<Topic>, in
// watermill-sql's queue schema. The forwarder reads the committed rows not yet acked and
// marks them acked once relayed. In production set DeleteOnAck, or the table (and the scan
// for unacked rows) grows for ever; the example keeps the rows so that it can count them.
//
// Why the queue schema: DefaultPostgreSQLSchema reads by offset and, so as never to skip a
// row whose transaction is still open, only rows older than the oldest transaction open on
// the server (pg_snapshot_xmin). One long transaction anywhere, a report or a bulk load,
// then holds back every event until it ends (TestOutbox keeps one open). The queue schema
// reads what is committed and not yet acked, so it does not wait; it has no consumer
// groups, which one forwarder does not need.
type Outbox struct {
	Topic   string
	schema  wmsql.PostgreSQLQueueSchema
	offsets wmsql.PostgreSQLQueueOffsetsAdapter
}

// Table returns the quoted name of the table watermill-sql creates for the outbox.
func (o Outbox) Table() string { return o.schema.MessagesTable(o.Topic) }

// Publisher returns what the handler publishes with: the forwarder's envelope (the real
// topic goes inside, the row goes to the outbox topic) around watermill-sql's publisher on
// the inbox transaction. Publish inserts a row in tx: it leaves when tx commits, never if
// tx rolls back. The wrapper from TxFromPgx is only for publishing; its Commit and Rollback
// would pass pgx a nil context, and the transaction belongs to the inbox middleware anyway.
func (o Outbox) Publisher(tx pgx.Tx) (message.Publisher, error) {
	// AutoInitializeSchema stays off: watermill-sql refuses it on a transaction, where a
	// CREATE TABLE could commit. Build creates the table (SubscribeInitialize).
	pub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: o.schema}, nil)
	if err != nil {
		return nil, err
	}
	return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: o.Topic}), nil
}

// subscriber reads the outbox for the forwarder: the committed rows not yet acked, one at a
// time, in insertion order. A nack (the destination refused a publish) is retried after
// ResendInterval; rows read but not acked when the forwarder stops are read again.
func (o Outbox) subscriber(pool *pgxpool.Pool) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		SchemaAdapter:    o.schema,
		OffsetsAdapter:   o.offsets,
		InitializeSchema: true,
		PollInterval:     50 * time.Millisecond,
		ResendInterval:   10 * time.Millisecond,
	}, nil)
}

// Handler is the billing handler with an outbox.
type Handler struct {
	Invoices *billing.Invoices
	Outbox   Outbox
}

// Handle writes the order's invoice (billing.Invoices.Handle) and publishes InvoiceCreated to
// the outbox, both in the inbox transaction. The event gets a new UUID on every run; only
// one run per order commits, so one event per order leaves, under one UUID, which
// consumers downstream deduplicate on (the forwarder relays at least once).
func (h Handler) Handle(msg *message.Message) error {
	if err := h.Invoices.Handle(msg); err != nil {
		return err
	}
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return billing.ErrNoTransaction
	}
	order, err := billing.DecodeOrder(msg)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(InvoiceCreated{OrderID: order.OrderID, AmountCents: order.AmountCents})
	if err != nil {
		return err
	}
	event := message.NewMessage(watermill.NewUUID(), payload)
	event.Metadata.Set("order_id", order.OrderID)
	event.SetContext(ctx) // the publisher runs its INSERT with the first message's context
	outbox, err := h.Outbox.Publisher(tx)
	if err != nil {
		return err
	}
	return outbox.Publish(EventsTopic, event)
}

// System is the whole example on one router: orders arrive on a Go channel, the billing
// handler runs behind the inbox and writes to the outbox, and the forwarder relays the
// outbox to the destination, another Go channel.
type System struct {
	Consumer   string // the inbox consumer of the billing handler
	InboxTable string
	Invoices   *billing.Invoices
	Outbox     Outbox
	Orders     *gochannel.GoChannel // publish orders to billing.Topic here
	Events     *gochannel.GoChannel // the forwarder publishes InvoiceCreated to EventsTopic here
	Router     *message.Router
}

// NewSystem picks random table and topic names; nothing exists yet. DropTables works from
// here on, so a caller can schedule it before Build.
func NewSystem() (*System, error) {
	invoices, err := billing.NewInvoices(billing.Postgres, testenv.Name("invoices"))
	if err != nil {
		return nil, err
	}
	return &System{
		Consumer:   "billing",
		InboxTable: testenv.Name("inbox"),
		Invoices:   invoices,
		Outbox:     Outbox{Topic: testenv.Name("outbox")},
	}, nil
}

// Build creates the tables and the router with the recommended middleware stack. wrap, if not
// nil, decorates the billing handler; outer middlewares run outside the whole stack.
func (s *System) Build(ctx context.Context, pool *pgxpool.Pool, wrap func(func(*message.Message) error) func(*message.Message) error, outer ...message.HandlerMiddleware) error {
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: s.InboxTable})
	if err != nil {
		return err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return err
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: s.Consumer}, nil)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, s.Invoices.CreateTableSQL()); err != nil {
		return err
	}
	fwdSubscriber, err := s.Outbox.subscriber(pool)
	if err != nil {
		return err
	}
	if err := fwdSubscriber.SubscribeInitialize(s.Outbox.Topic); err != nil {
		return err
	}

	s.Orders = gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	s.Events = gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	s.Router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	handle := Handler{Invoices: s.Invoices, Outbox: s.Outbox}.Handle
	if wrap != nil {
		handle = wrap(handle)
	}
	poisonQueue, err := middleware.PoisonQueue(s.Orders, billing.Topic+"_poison")
	if err != nil {
		return err
	}
	// AddConsumerHandler: no router publisher; the outbox is the only way out. The stack is
	// the billing handler's alone: the forwarder's handler on this router needs no inbox.
	handler := s.Router.AddConsumerHandler("billing", billing.Topic, s.Orders, handle)
	handler.AddMiddleware(outer...) // not part of the stack: what a test observes, outermost
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}
	handler.AddMiddleware(
		poisonQueue,                        // outermost: takes what every retry failed
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)
	_, err = forwarder.NewForwarder(fwdSubscriber, s.Events, watermill.NopLogger{}, forwarder.Config{
		ForwarderTopic: s.Outbox.Topic,
		Router:         s.Router,
	})
	return err
}

// Start runs the router until Close.
func (s *System) Start(ctx context.Context) error {
	runErr := make(chan error, 1)
	go func() { runErr <- s.Router.Run(ctx) }()
	select {
	case <-s.Router.Running():
		return nil
	case err := <-runErr:
		return fmt.Errorf("router: %w", err)
	}
}

// Close stops the router (which closes the orders Go channel and the forwarder's
// subscriber) and the destination.
func (s *System) Close() error {
	var errs []error
	if s.Router != nil {
		errs = append(errs, s.Router.Close())
	}
	if s.Events != nil {
		errs = append(errs, s.Events.Close())
	}
	return errors.Join(errs...)
}

// DropTables drops every table the system creates, its own and watermill-sql's.
func (s *System) DropTables(ctx context.Context, pool *pgxpool.Pool) error {
	quotedInbox, err := sqlinbox.Postgres().QuoteTable(s.InboxTable)
	if err != nil {
		return err
	}
	var errs []error
	for _, table := range []string{quotedInbox, s.Outbox.Table()} {
		_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		errs = append(errs, err)
	}
	_, err = pool.Exec(ctx, s.Invoices.DropTableSQL())
	return errors.Join(append(errs, err)...)
}

// OutboxCount counts the events committed to the outbox, forwarded or not.
func (s *System) OutboxCount(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Outbox.Table()).Scan(&n)
	return n, err
}

func run(ctx context.Context, postgres string, orders int, out io.Writer) error {
	pool, err := pgxpool.New(ctx, postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := NewSystem()
	if err != nil {
		return err
	}
	defer s.DropTables(context.WithoutCancel(ctx), pool)

	// Every 10th order's first run fails after it has written its invoice and its event: the
	// inbox rolls all of it back, the Go channel delivers the order again, and only the event
	// of the run that commits ever reaches the destination.
	failing := map[string]bool{} // order IDs; filled before the first publish, read-only after
	var mu sync.Mutex
	failed := map[string]bool{}
	failFirstRun := func(h func(*message.Message) error) func(*message.Message) error {
		return func(msg *message.Message) error {
			if err := h(msg); err != nil || !failing[msg.UUID] {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if failed[msg.UUID] {
				return nil
			}
			failed[msg.UUID] = true
			return errors.New("first run fails on purpose, after publishing")
		}
	}
	if err := s.Build(ctx, pool, failFirstRun); err != nil {
		return err
	}
	events, err := s.Events.Subscribe(ctx, EventsTopic)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Close()

	placed := make([]billing.OrderPlaced, orders)
	for i := range placed {
		placed[i] = billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rand.IntN(10000))}
		failing[placed[i].OrderID] = i%10 == 0
	}
	published := 0
	for _, order := range placed {
		for range 1 + rand.IntN(3) {
			msg, err := billing.NewOrderMessage(order)
			if err != nil {
				return err
			}
			if err := s.Orders.Publish(billing.Topic, msg); err != nil {
				return err
			}
			published++
		}
	}

	delivered, invoiced := 0, map[string]bool{}
	timeout := time.After(60 * time.Second)
	for len(invoiced) < orders {
		select {
		case event := <-events:
			delivered++
			invoiced[event.Metadata.Get("order_id")] = true
			event.Ack()
		case <-timeout:
			return fmt.Errorf("after 60s: InvoiceCreated for %d of %d orders", len(invoiced), orders)
		}
	}
	if err := s.Close(); err != nil {
		return err
	}

	counts, err := s.Invoices.CountPgx(ctx, pool)
	if err != nil {
		return err
	}
	inOutbox, err := s.OutboxCount(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", orders)
	fmt.Fprintf(tw, "messages published\t%d\t\n", published)
	fmt.Fprintf(tw, "runs rolled back after publishing\t%d\t\n", len(failed))
	fmt.Fprintf(tw, "invoices created\t%d\t\n", counts.Invoices)
	fmt.Fprintf(tw, "events in the outbox\t%d\t\n", inOutbox)
	fmt.Fprintf(tw, "events delivered\t%d\t\n", delivered)
	if err := tw.Flush(); err != nil {
		return err
	}
	if counts.Invoices != orders || inOutbox != orders {
		return fmt.Errorf("%d invoices and %d outbox events for %d orders", counts.Invoices, inOutbox, orders)
	}
	return nil
}

// Command outbox runs an order handler behind the inbox with a transactional outbox, the
// Watermill way: the handler writes the invoice and its InvoiceCreated event in the inbox
// transaction (the event through watermill-sql's publisher, wrapped by the forwarder's
// envelope), and Watermill's forwarder relays the events from PostgreSQL to the destination
// pub/sub. The invoice, the inbox claim and the event commit together or not at all; the
// handler returns no messages. The program fails the first run of some orders after they
// published, and checks that one event per order arrives (demo.go).
//
//	go run ./examples/outbox -postgres postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
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
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	postgres := flag.String("postgres", envOr("INBOX_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL URL, for the inbox, the invoices and the outbox (default $INBOX_TEST_POSTGRES_URL, or the shown value)")
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()
	if err := run(context.Background(), *postgres, *orders, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// The topics: orders arrive on OrdersTopic, the InvoiceCreated events leave on EventsTopic.
const (
	OrdersTopic = "orders"
	EventsTopic = "invoices"
)

// OrderPlaced is the event the handler consumes, as JSON. Its message's UUID is the order
// ID, so that every copy of one order has the same inbox key.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// InvoiceCreated is the event the handler publishes, through the outbox, for every invoice.
type InvoiceCreated struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Handler is the order handler with an outbox.
type Handler struct {
	InvoiceTable string
	Outbox       Outbox
}

// Handle writes the order's invoice and publishes InvoiceCreated to the outbox, both in the
// inbox transaction. The event gets a new UUID on every run; only one run per order commits,
// so one event per order leaves, under one UUID, which consumers downstream deduplicate on
// (the forwarder relays at least once).
func (h Handler) Handle(msg *message.Message) error {
	order, err := decodeOrder(msg)
	if err != nil {
		return err
	}
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
	if !ok {
		return errNoTransaction
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+h.InvoiceTable+" (order_id, amount_cents) VALUES ($1, $2)",
		order.OrderID, order.AmountCents); err != nil {
		return err
	}
	payload, err := json.Marshal(InvoiceCreated(order))
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

// errNoTransaction is what Handle returns for a message that does not come through the
// inbox middleware: without the inbox transaction it refuses to write.
var errNoTransaction = errors.New("no inbox transaction: run the handler behind the inbox middleware")

// decodeOrder reads the OrderPlaced in msg's payload.
func decodeOrder(msg *message.Message) (OrderPlaced, error) {
	var order OrderPlaced
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return OrderPlaced{}, fmt.Errorf("decode order %s: %w", msg.UUID, err)
	}
	return order, nil
}

// newOrderMessage returns a message carrying order, with the order ID as its UUID.
func newOrderMessage(order OrderPlaced) (*message.Message, error) {
	payload, err := json.Marshal(order)
	if err != nil {
		return nil, err
	}
	return message.NewMessage(order.OrderID, payload), nil
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

// System is the whole example on one router: orders arrive on a Go channel, the order
// handler runs behind the inbox and writes to the outbox, and the forwarder relays the
// outbox to the destination, another Go channel.
type System struct {
	Consumer     string // the inbox consumer of the order handler
	InboxTable   string
	InvoiceTable string
	Outbox       Outbox
	Orders       *gochannel.GoChannel // publish orders to OrdersTopic here
	Events       *gochannel.GoChannel // the forwarder publishes InvoiceCreated to EventsTopic here
	Router       *message.Router
}

// NewSystem picks table and topic names no other run uses; nothing exists yet. DropTables
// works from here on, so a caller can schedule it before Build.
func NewSystem() *System {
	suffix := strconv.FormatUint(rand.Uint64(), 36)
	return &System{
		Consumer:     "billing",
		InboxTable:   "inbox_" + suffix,
		InvoiceTable: "invoices_" + suffix,
		Outbox:       Outbox{Topic: "outbox_" + suffix},
	}
}

// Build creates the tables, and the router with the order handler in the recommended
// middleware stack and the forwarder. wrap, if not nil, decorates the order handler; outer
// middlewares run outside the whole stack.
func (s *System) Build(ctx context.Context, pool *pgxpool.Pool, wrap func(func(*message.Message) error) func(*message.Message) error, outer ...message.HandlerMiddleware) error {
	store, err := s.createTables(ctx, pool)
	if err != nil {
		return err
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: s.Consumer}, nil)
	if err != nil {
		return err
	}
	s.Orders = gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	s.Events = gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	s.Router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	handle := Handler{InvoiceTable: s.InvoiceTable, Outbox: s.Outbox}.Handle
	if wrap != nil {
		handle = wrap(handle)
	}
	logger := watermill.NewStdLogger(false, false) // the retried and the poisoned failures, to stderr
	poisonQueue, err := middleware.PoisonQueueWithFilter(s.Orders, OrdersTopic+"_poison", inbox.Poisonous)
	if err != nil {
		return err
	}
	// AddConsumerHandler: no router publisher; the outbox is the only way out. The stack is
	// the order handler's alone: the forwarder's handler on this router needs no inbox.
	handler := s.Router.AddConsumerHandler("billing", OrdersTopic, s.Orders, handle)
	handler.AddMiddleware(outer...) // not part of the stack: what a test observes, outermost
	retry := middleware.Retry{
		MaxRetries:      math.MaxInt32, // no count: inbox.ShouldRetry decides when to stop
		InitialInterval: 50 * time.Millisecond,
		Multiplier:      1.5,
		MaxInterval:     2 * time.Second,              // a database that is away is tried every 2 s
		ShouldRetry:     inbox.ShouldRetry(3, logger), // the message's own failure: 3 retries, then the poison queue
		Logger:          logger,                       // logs each failure it retries
	}
	handler.AddMiddleware(
		poisonQueue,                        // outermost: takes the message's own failures, not the database's
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)
	return s.addForwarder(pool)
}

// createTables creates the inbox table, returning the store on it, and the invoice table.
// The invoice table has no UNIQUE constraint on order_id, on purpose: the inbox alone keeps
// a second invoice out, so counting rows proves it.
func (s *System) createTables(ctx context.Context, pool *pgxpool.Pool) (*sqlinbox.Store, error) {
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: s.InboxTable})
	if err != nil {
		return nil, err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return nil, err
	}
	if err := store.CheckTable(ctx); err != nil { // refuse to start on a table or a driver that cannot work
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+s.InvoiceTable+" (order_id text NOT NULL, amount_cents bigint NOT NULL)"); err != nil {
		return nil, err
	}
	return store, nil
}

// addForwarder creates the outbox table and adds the forwarder, which relays the outbox to
// the destination, to the router.
func (s *System) addForwarder(pool *pgxpool.Pool) error {
	fwdSubscriber, err := s.Outbox.subscriber(pool)
	if err != nil {
		return err
	}
	if err := fwdSubscriber.SubscribeInitialize(s.Outbox.Topic); err != nil {
		return err
	}
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
	_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+s.InboxTable+", "+s.InvoiceTable+", "+s.Outbox.Table())
	return err
}

// InvoiceCounts counts the invoices, and the distinct orders they are for.
func (s *System) InvoiceCounts(ctx context.Context, pool *pgxpool.Pool) (invoices, orders int, err error) {
	err = pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT order_id) FROM "+s.InvoiceTable).Scan(&invoices, &orders)
	return invoices, orders, err
}

// OutboxCount counts the events committed to the outbox, forwarded or not.
func (s *System) OutboxCount(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Outbox.Table()).Scan(&n)
	return n, err
}

// envOr returns the environment variable's value, or fallback when it is unset: the
// program finds its services where the repository's tests do.
func envOr(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

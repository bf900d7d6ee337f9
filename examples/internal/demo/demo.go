// Package demo is the program every broker example runs once it has built its publisher and
// subscriber: the same router, inbox middleware and billing handler whatever the broker.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// DefaultPostgresURL is where the examples find PostgreSQL unless told otherwise.
const DefaultPostgresURL = testenv.DefaultPostgresURL

// Options configures Run.
type Options struct {
	// PostgresURL is the database for the inbox and the invoices.
	PostgresURL string
	// Topic to publish to and consume from.
	Topic string
	// Orders is how many distinct orders to publish, each 1-3 times. Default: 200.
	Orders int
	// Publisher and Subscriber are the broker's. Run closes neither; the router closes the
	// subscriber.
	Publisher  message.Publisher
	Subscriber message.Subscriber
	// Out receives the result table.
	Out io.Writer
	// Remove, if set, deletes what the broker keeps of Topic (a queue, a stream, tables);
	// Run calls it when it ends, whatever the outcome, and fails if it fails.
	Remove func(ctx context.Context) error
	// Leaves says what stays on the broker when Run ends, printed after the result table;
	// "" for nothing.
	Leaves string
}

// Topic returns a topic name no other run uses (orders_<random>), so that what a crashed
// run left on a broker can never reach the next run.
func Topic() string { return testenv.Name(billing.Topic) }

// Run creates an inbox table and an invoice table (random names, dropped at the end), runs
// the billing handler behind the inbox middleware in a router, publishes the orders with
// duplicates, waits until every order is invoiced, prints what happened, and returns an
// error unless every order got exactly one invoice.
func Run(ctx context.Context, o Options) (err error) {
	if o.Orders == 0 {
		o.Orders = 200
	}
	if o.Remove != nil {
		// Deferred first, so it runs last: after the router and the subscriber closed.
		defer func() {
			if removeErr := o.Remove(context.WithoutCancel(ctx)); removeErr != nil {
				err = errors.Join(err, fmt.Errorf("remove topic %s: %w", o.Topic, removeErr))
			}
		}()
	}
	pool, err := pgxpool.New(ctx, o.PostgresURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// The inbox: a table, a store on it, and the middleware.
	inboxTable := testenv.Name("inbox")
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		return err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return err
	}
	quotedInbox, err := sqlinbox.Postgres().QuoteTable(inboxTable)
	if err != nil {
		return err
	}
	defer pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+quotedInbox)
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		return err
	}

	// The business side: an invoice table and the handler that writes it.
	invoices, err := billing.NewInvoices(billing.Postgres, testenv.Name("invoices"))
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, invoices.CreateTableSQL()); err != nil {
		return err
	}
	defer pool.Exec(context.WithoutCancel(ctx), invoices.DropTableSQL())

	// Counters for the table printed at the end. A delivery counts once it is done and about
	// to be acked, so that the router is closed only when no copy is still in flight: a copy
	// cancelled by the close would fail every retry and be poisoned.
	var deliveries, processed atomic.Int64
	count := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				deliveries.Add(1)
			}
			return out, err
		}
	}
	handle := func(msg *message.Message) error {
		if err := invoices.Handle(msg); err != nil {
			return err
		}
		processed.Add(1) // inside the inbox transaction: once per order
		return nil
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	// Poisoned messages would go to a topic of the broker; here they are held in memory, so
	// that a run leaves nothing on the broker, and any of them fails the run.
	poisoned := &Held{}
	poisonQueue, err := middleware.PoisonQueue(poisoned, o.Topic+"_poison")
	if err != nil {
		return err
	}
	router.AddMiddleware(count) // not part of the stack: counts deliveries for the table below
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}
	router.AddMiddleware(
		poisonQueue,                        // outermost: takes what every retry failed
		retry.Middleware,                   // each attempt claims in a fresh transaction
		middleware.Recoverer,               // a panic becomes an error that Retry retries
		inboxMiddleware,                    // claim; handler; commit or roll back
		middleware.Timeout(10*time.Second), // bounds the handler, inside the inbox
		middleware.CorrelationID,           // stamps returned messages before the inbox records them
	)
	router.AddConsumerHandler("billing", o.Topic, o.Subscriber, handle)
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	defer router.Close()
	select {
	case <-router.Running():
	case err := <-runErr:
		return fmt.Errorf("router: %w", err)
	}

	published, err := publishOrders(o.Publisher, o.Topic, o.Orders)
	if err != nil {
		return err
	}

	deadline := time.Now().Add(60 * time.Second)
	for processed.Load() < int64(o.Orders) || deliveries.Load() < int64(published) {
		if time.Now().After(deadline) {
			return fmt.Errorf("after 60s: %d of %d orders processed, %d of %d messages delivered",
				processed.Load(), o.Orders, deliveries.Load(), published)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := router.Close(); err != nil {
		return err
	}

	counts, err := invoices.CountPgx(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(o.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", o.Orders)
	fmt.Fprintf(tw, "messages published\t%d\t\n", published)
	fmt.Fprintf(tw, "deliveries\t%d\t\n", deliveries.Load())
	fmt.Fprintf(tw, "invoices created\t%d\t\n", counts.Invoices)
	fmt.Fprintf(tw, "duplicates skipped\t%d\t\n", deliveries.Load()-processed.Load())
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.Leaves != "" {
		fmt.Fprintf(o.Out, "left in place: %s\n", o.Leaves)
	}
	if n := poisoned.Count(); n > 0 {
		return fmt.Errorf("%d messages poisoned: %s", n, strings.Join(poisoned.Reasons(), "; "))
	}
	if counts.Invoices != o.Orders {
		return fmt.Errorf("%d invoices for %d orders", counts.Invoices, o.Orders)
	}
	return nil
}

// publishOrders publishes n orders, each 1-3 times, the copies of every other order from
// separate goroutines at once. It returns how many messages it published.
func publishOrders(pub message.Publisher, topic string, n int) (int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	published := 0
	for i := range n {
		order := billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rand.IntN(10000))}
		copies := 1 + rand.IntN(3)
		published += copies
		for range copies {
			msg, err := billing.NewOrderMessage(order)
			if err != nil {
				return 0, err
			}
			send := func() {
				if err := pub.Publish(topic, msg); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
			if i%2 == 0 {
				wg.Go(send)
			} else {
				send()
			}
		}
	}
	wg.Wait()
	return published, errors.Join(errs...)
}

// The default address of every service the examples use: internal/testenv's defaults, and
// Kafka's usual port. docker-compose.yml publishes each of them (TestComposePublishesDefaults).
const (
	DefaultAMQPURL      = testenv.DefaultAMQPURL
	DefaultNATSURL      = testenv.DefaultNATSURL
	DefaultRedisAddr    = testenv.DefaultRedisAddr
	DefaultKafkaBrokers = "127.0.0.1:9092"
)

// Addresses the examples use unless a flag says otherwise: the same INBOX_TEST_* variables
// the tests read (internal/testenv), then the defaults above. Kafka has no variable: its
// tests run in-process.
var (
	PostgresURL = envOr(testenv.PostgresURLVar, DefaultPostgresURL)
	AMQPURL     = envOr(testenv.AMQPURLVar, DefaultAMQPURL)
	NATSURL     = envOr(testenv.NATSURLVar, DefaultNATSURL)
	RedisAddr   = envOr(testenv.RedisAddrVar, DefaultRedisAddr)
)

// FlagHelp ends the help text of a flag whose default comes from variable.
func FlagHelp(what, variable string) string {
	return what + " (default $" + variable + ", or the shown value)"
}

func envOr(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

// DefaultAddresses lists every default address above, by service, for the compose test.
var DefaultAddresses = map[string]string{
	"PostgreSQL": DefaultPostgresURL,
	"MariaDB":    testenv.DefaultMySQLDSN,
	"RabbitMQ":   DefaultAMQPURL,
	"NATS":       DefaultNATSURL,
	"Redis":      DefaultRedisAddr,
	"Kafka":      DefaultKafkaBrokers,
}

// Held is a message.Publisher that keeps what is published to it in memory: a poison queue
// for programs that must leave nothing on their broker.
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

// Reasons returns the distinct reasons the poison queue recorded on the messages, in the order
// first seen.
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

// Count returns how many messages were published to h.
func (h *Held) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// Command quickstart shows the inbox without any server: a Go channel as the broker and a
// SQLite file as the database. It publishes a few hundred orders, most of them more than
// once and some copies at the same moment, and checks that each order got exactly one
// invoice.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	dir, err := os.MkdirTemp("", "inbox-quickstart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res, err := run(context.Background(), dir, 300, os.Stdout)
	os.RemoveAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
	if res.Invoices != res.Orders {
		fmt.Fprintf(os.Stderr, "quickstart: %d invoices for %d orders\n", res.Invoices, res.Orders)
		os.Exit(1)
	}
}

// result is what one run did.
type result struct {
	Orders     int // unique orders published
	Deliveries int // messages handled, copies included
	Invoices   int // invoice rows written
	Duplicates int // deliveries the inbox skipped
}

func run(ctx context.Context, dir string, orders int, out io.Writer) (result, error) {
	// SQLite allows one writer at a time: the busy timeout makes the others wait for it.
	dsn := "file:" + filepath.Join(dir, "quickstart.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)

	store, err := sqlinbox.New(db, sqlinbox.SQLite(), sqlinbox.Config{})
	if err != nil {
		return result{}, err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return result{}, err
	}
	invoices, err := billing.NewInvoices(billing.SQLite, "invoices")
	if err != nil {
		return result{}, err
	}
	if _, err := db.ExecContext(ctx, invoices.CreateTableSQL()); err != nil {
		return result{}, err
	}
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		return result{}, err
	}

	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return result{}, err
	}

	// Count every delivery and every handler run that committed, to print the table.
	var delivered, processed atomic.Int64
	var total atomic.Int64 // messages published, once known
	total.Store(-1)
	allHandled := make(chan struct{})
	var closeOnce sync.Once
	count := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil && delivered.Add(1) == total.Load() {
				closeOnce.Do(func() { close(allHandled) })
			}
			return out, err
		}
	}
	handle := func(msg *message.Message) error {
		if err := invoices.Handle(msg); err != nil {
			return err
		}
		processed.Add(1) // inside the inbox transaction: runs once per order
		return nil
	}
	poisonQueue, err := middleware.PoisonQueue(pubSub, billing.Topic+"_poison")
	if err != nil {
		return result{}, err
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
	router.AddConsumerHandler("billing", billing.Topic, pubSub, handle)

	go func() { _ = router.Run(ctx) }()
	defer router.Close()
	<-router.Running()

	// Publish every order 1-3 times; half of the orders send their copies concurrently.
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	var publishErr atomic.Pointer[error]
	messages := 0
	for i := range orders {
		order := billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(100 + rng.IntN(10000))}
		copies := 1 + rng.IntN(3)
		messages += copies
		for range copies {
			msg, err := billing.NewOrderMessage(order)
			if err != nil {
				return result{}, err
			}
			publish := func() {
				if err := pubSub.Publish(billing.Topic, msg); err != nil {
					publishErr.CompareAndSwap(nil, &err)
				}
			}
			if i%2 == 0 {
				wg.Go(publish)
			} else {
				publish()
			}
		}
	}
	wg.Wait()
	if errp := publishErr.Load(); errp != nil {
		return result{}, *errp
	}
	if total.Store(int64(messages)); delivered.Load() == int64(messages) {
		closeOnce.Do(func() { close(allHandled) })
	}

	select {
	case <-allHandled:
	case <-time.After(30 * time.Second):
		return result{}, fmt.Errorf("only %d of %d messages handled after 30s", delivered.Load(), messages)
	}
	if err := router.Close(); err != nil {
		return result{}, err
	}

	counts, err := invoices.CountSQL(ctx, db)
	if err != nil {
		return result{}, err
	}
	res := result{
		Orders:     orders,
		Deliveries: int(delivered.Load()),
		Invoices:   counts.Invoices,
		Duplicates: int(delivered.Load() - processed.Load()),
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "unique orders\t%d\t\n", res.Orders)
	fmt.Fprintf(tw, "deliveries\t%d\t\n", res.Deliveries)
	fmt.Fprintf(tw, "invoices created\t%d\t\n", res.Invoices)
	fmt.Fprintf(tw, "duplicates skipped\t%d\t\n", res.Duplicates)
	if err := tw.Flush(); err != nil {
		return result{}, err
	}
	return res, nil
}

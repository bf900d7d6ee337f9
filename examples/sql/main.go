// Command sql runs the billing handler behind the inbox with PostgreSQL as the broker too
// (watermill-sql v4): messages are rows in a table of the same database as the invoices.
//
//	go run ./examples/sql -postgres postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL (13 or later), for the messages and the invoices", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(*postgres, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "sql:", err)
		os.Exit(1)
	}
}

func run(postgres string, orders int) error {
	pool, err := pgxpool.New(context.Background(), postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	publisher, err := newPublisher(pool)
	if err != nil {
		return err
	}
	subscriber, err := newSubscriber(pool)
	if err != nil {
		return err
	}
	topic := demo.Topic()
	return demo.Run(context.Background(), demo.Options{
		PostgresURL: postgres,
		Topic:       topic,
		Orders:      orders,
		Publisher:   publisher,
		Subscriber:  subscriber,
		Out:         os.Stdout,
		// The tables watermill-sql created for the topic.
		Remove: func(ctx context.Context) error {
			for _, table := range []string{"watermill_" + topic, "watermill_offsets_" + topic} {
				quoted, err := sqlinbox.Postgres().QuoteTable(table)
				if err != nil {
					return err
				}
				if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+quoted); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// newPublisher inserts messages into the table watermill_<topic>, created on first use.
//
// To publish from inside the handler in the inbox transaction (an outbox), build a
// publisher on wmsql.TxFromPgx(tx) with the pgx.Tx from inbox.TxFromContext, and never
// commit or roll back through that wrapper: its Commit and Rollback pass a nil context to
// pgx. The inbox ends the transaction.
func newPublisher(pool *pgxpool.Pool) (*wmsql.Publisher, error) {
	return wmsql.NewPublisher(wmsql.BeginnerFromPgx(pool), wmsql.PublisherConfig{
		SchemaAdapter:        wmsql.DefaultPostgreSQLSchema{},
		AutoInitializeSchema: true,
	}, watermill.NopLogger{})
}

// newSubscriber reads the topic's table as the consumer group "billing", whose position is
// kept in watermill_offsets_<topic>. It delivers one message at a time, in order. A nack is
// delivered again after ResendInterval; a message read but not acked when the subscriber
// stops is read again by the next subscriber of the group, with the rest of its batch.
func newSubscriber(pool *pgxpool.Pool) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		ConsumerGroup:    "billing",
		SchemaAdapter:    wmsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     100 * time.Millisecond,
		ResendInterval:   10 * time.Millisecond,
	}, watermill.NopLogger{})
}

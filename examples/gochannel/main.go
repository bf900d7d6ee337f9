// Command gochannel runs the billing handler behind the inbox on Watermill's in-memory Go
// channel pub/sub, with PostgreSQL as the database.
//
//	go run ./examples/gochannel -postgres postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

func main() {
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	pubSub := newPubSub()
	defer pubSub.Close()
	err := demo.Run(context.Background(), demo.Options{
		PostgresURL: *postgres,
		Topic:       billing.Topic,
		Orders:      *orders,
		Publisher:   pubSub,
		Subscriber:  pubSub,
		Out:         os.Stdout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gochannel:", err)
		os.Exit(1)
	}
}

// newPubSub returns an in-memory pub/sub. Every message is handled in its own goroutine,
// so copies of one order race each other. A nack makes it send the message again; nothing
// survives the process.
func newPubSub() *gochannel.GoChannel {
	return gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
}

// Command redisstream runs the billing handler behind the inbox on Redis Streams.
//
//	go run ./examples/redisstream -redis 127.0.0.1:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"

	"github.com/inboxkit/watermill-inbox/examples/internal/demo"
)

func main() {
	redisAddr := flag.String("redis", demo.RedisAddr, demo.FlagHelp("Redis address", "INBOX_TEST_REDIS_ADDR"))
	postgres := flag.String("postgres", demo.PostgresURL, demo.FlagHelp("PostgreSQL URL", "INBOX_TEST_POSTGRES_URL"))
	orders := flag.Int("orders", 200, "distinct orders to publish, each 1-3 times")
	flag.Parse()

	if err := run(*redisAddr, *postgres, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "redisstream:", err)
		os.Exit(1)
	}
}

func run(redisAddr, postgres string, orders int) error {
	// Publisher and subscriber each close their own client.
	publisher, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client: redis.NewClient(&redis.Options{Addr: redisAddr}),
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer publisher.Close()
	subscriber, err := newSubscriber(redisAddr, 5*time.Second)
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
		// The stream's key; its consumer group goes with it.
		Remove: func(ctx context.Context) error {
			client := redis.NewClient(&redis.Options{Addr: redisAddr})
			defer client.Close()
			return client.Del(ctx, topic).Err()
		},
	})
}

// newSubscriber joins the consumer group "billing" as a new consumer. A nack makes the
// subscriber hand the message to the handler again at once. A message a consumer read but
// never acked stays pending in the group; once it has been idle for claimAfter, any
// consumer of the group claims it and gets it again, so a consumer that died does not lose
// its messages. claimAfter must be longer than the handler takes.
func newSubscriber(redisAddr string, claimAfter time.Duration) (*redisstream.Subscriber, error) {
	return redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        redis.NewClient(&redis.Options{Addr: redisAddr}), // closed by the subscriber
		ConsumerGroup: "billing",
		// Consumer: a random name per subscriber, the default.
		ClaimInterval: claimAfter / 5,
		MaxIdleTime:   claimAfter,
	}, watermill.NopLogger{})
}

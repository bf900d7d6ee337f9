package main

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestRedisStream: three consumers in one consumer group; a nack is handed to the handler
// again, and the messages the first consumers read but never acked stay pending in the group
// until the consumers that replace them claim them.
func TestRedisStream(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = client.Close() })
	pool := e2e.Pool(t)
	stream := testenv.Name("orders")
	t.Cleanup(func() {
		if err := client.Del(context.WithoutCancel(t.Context()), stream).Err(); err != nil {
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})

	publisher, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client: redis.NewClient(&redis.Options{Addr: redisAddr}),
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })
	e2e.Run(t, pool, e2e.Scenario{
		Topic:     stream,
		Publisher: publisher,
		NewSubscriber: func(t *testing.T) message.Subscriber {
			sub, err := newSubscriber(redisAddr, time.Second) // claim a dead consumer's messages soon
			if err != nil {
				t.Fatal(err)
			}
			return sub
		},
		Workers: 3,
		Crashes: 2,
	})
}

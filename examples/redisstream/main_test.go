package main

import (
	"bytes"
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

// TestRedisStreamProgram runs the program as .ci/run does, with few orders: its own handler, behind the
// recommended stack, writes one invoice per order (run fails otherwise, or if it cannot
// remove what it created).
func TestRedisStreamProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.RedisAddr(t), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

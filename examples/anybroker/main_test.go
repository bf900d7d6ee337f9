package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestAnyBroker runs the one program on every broker, changing nothing but the
// configuration: the proof that swapping brokers needs no code change. (The per-broker
// tests in examples/<broker> are the ones that force redeliveries.)
func TestAnyBroker(t *testing.T) {
	postgres := testenv.PostgresURL(t)
	for _, broker := range brokerNames() {
		t.Run(broker, func(t *testing.T) {
			cfg := config{Broker: broker, Topic: testenv.Name("orders"), Orders: 50, Postgres: postgres}
			switch broker {
			case "kafka":
				cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, cfg.Topic))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cluster.Close)
				cfg.Kafka = strings.Join(cluster.ListenAddrs(), ",")
			case "amqp":
				cfg.AMQP = testenv.AMQPURL(t)
				t.Cleanup(func() { deleteQueue(t, cfg.AMQP, cfg.Topic) })
			case "nats":
				cfg.NATS = testenv.NATSURL(t)
				t.Cleanup(func() { deleteStream(t, cfg.NATS, cfg.Topic) })
			case "redisstream":
				cfg.Redis = testenv.RedisAddr(t)
				t.Cleanup(func() {
					client := redis.NewClient(&redis.Options{Addr: cfg.Redis})
					defer client.Close()
					if err := client.Del(context.WithoutCancel(t.Context()), cfg.Topic).Err(); err != nil {
						t.Errorf("delete stream: %v", err)
					}
				})
			case "sql":
				pool := e2e.Pool(t)
				e2e.DropTable(t, pool, "watermill_"+cfg.Topic)
				e2e.DropTable(t, pool, "watermill_offsets_"+cfg.Topic)
			}

			var out bytes.Buffer
			if err := run(t.Context(), cfg, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "invoices created") {
				t.Errorf("no result table:\n%s", out.String())
			}
			t.Log("\n" + out.String())
		})
	}
}

func TestUnknownBroker(t *testing.T) {
	err := run(t.Context(), config{Broker: "carrier-pigeon"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "unknown broker") {
		t.Errorf("err = %v, want unknown broker", err)
	}
}

func deleteQueue(t *testing.T, url, queue string) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Errorf("delete queue: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete queue: %v", err)
		return
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Errorf("delete queue: %v", err)
	}
}

func deleteStream(t *testing.T, url, stream string) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Errorf("delete stream: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("delete stream: %v", err)
		return
	}
	if err := js.DeleteStream(context.WithoutCancel(t.Context()), stream); err != nil {
		t.Errorf("delete stream: %v", err)
	}
}

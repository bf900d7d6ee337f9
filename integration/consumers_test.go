package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// The tests in this file run several router handlers on real brokers, the way teams add
// concurrency (competing handlers on one queue or consumer group) or several effects of one
// event (fan-out, a queue each), and check that the consumer the inbox claims under gives
// each order exactly one effect per consumer, or is refused before any effect.

// consumerOrders and consumerCopies: every order is published this many times.
const consumerOrders, consumerCopies = 200, 2

// consumerHandler is one router handler of a run: its name, the effect it writes (the
// business row's consumer column) and where it reads.
type consumerHandler struct {
	name, effect string
	topic        string
	subscriber   message.Subscriber
}

// consumerRun is a router with handlers behind one inbox middleware, writing one business
// row per run through the inbox transaction.
type consumerRun struct {
	b      *backend
	router *message.Router
	done   chan struct{}

	mu    sync.Mutex
	acked int            // deliveries that reached the router as a success
	nacks map[string]int // failed deliveries by error text
}

// startConsumers builds the inbox middleware from config and runs a router with handlers.
// The error is NewMiddleware's: a configuration it refuses runs nothing.
func startConsumers(t *testing.T, b *backend, config inbox.Config, handlers []consumerHandler) (*consumerRun, error) {
	t.Helper()
	logger := watermill.NopLogger{}
	mw, err := inbox.NewMiddleware(b.store, config, logger)
	if err != nil {
		return nil, err
	}
	r := &consumerRun{b: b, done: make(chan struct{}), nacks: map[string]int{}}
	r.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	r.router.AddMiddleware(r.count, mw)
	for _, h := range handlers {
		r.router.AddConsumerHandler(h.name, h.topic, h.subscriber, func(msg *message.Message) error {
			ctx := msg.Context()
			tx, ok := b.inTx(ctx)
			if !ok {
				return errors.New("no inbox transaction in the handler's context")
			}
			return tx.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", h.effect, msg.UUID)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		if err := r.router.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); r.stop(t) })
	<-r.router.Running()
	return r, nil
}

func (r *consumerRun) count(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.nacks[err.Error()]++
		} else {
			r.acked++
		}
		return out, err
	}
}

func (r *consumerRun) stop(t *testing.T) {
	if err := r.router.Close(); err != nil {
		t.Errorf("closing router: %v", err)
	}
	<-r.done
}

// waitAcked waits until n deliveries were acked, and fails the test if any was nacked:
// no fault is injected, so nothing may fail.
func (r *consumerRun) waitAcked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		acked, nacks := r.acked, len(r.nacks)
		r.mu.Unlock()
		if nacks > 0 {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("nacks: %v", r.nacks)
		}
		if acked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries acked", acked, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantEffects checks that every order has exactly one business row of each effect.
func (r *consumerRun) wantEffects(t *testing.T, effects ...string) {
	t.Helper()
	for _, effect := range effects {
		total := r.b.rows(t, r.b.business, "WHERE consumer = ?", effect)
		distinct := r.b.rows(t, "(SELECT DISTINCT msg_key FROM "+r.b.business+" WHERE consumer = ?) AS d", "", effect)
		if total != consumerOrders || distinct != consumerOrders {
			t.Errorf("%s: %d rows for %d orders, want exactly one per order (%d)", effect, total, distinct, consumerOrders)
		}
	}
}

// wantRefused checks a loud refusal before any effect: NewMiddleware's error names the
// setting to use, and nothing was written.
func wantRefused(t *testing.T, b *backend, err error) {
	t.Helper()
	if !errors.Is(err, inbox.ErrNoConsumer) || !strings.Contains(err.Error(), "Config.Consumer") {
		t.Errorf("NewMiddleware: %v, want an error wrapping inbox.ErrNoConsumer that names Config.Consumer", err)
	}
	wantRows(t, "business rows", b.rows(t, b.business, ""), 0)
	wantRows(t, "claims", b.rows(t, b.table, ""), 0)
}

// orderCopies returns every order consumerCopies times, copies of one order with one UUID.
func orderCopies() []*message.Message {
	var msgs []*message.Message
	for i := range consumerOrders {
		for range consumerCopies {
			msgs = append(msgs, message.NewMessage(fmt.Sprintf("order-%04d", i), []byte("{}")))
		}
	}
	return msgs
}

// competingConfigs are the configurations of competing handlers: the zero Config, which must
// be refused, and the two ways of naming their one consumer.
var competingConfigs = []struct {
	name   string
	config inbox.Config
}{
	{"zero Config", inbox.Config{}},
	{"Consumer", inbox.Config{Consumer: "billing"}},
	{"ConsumerByHandler", inbox.Config{ConsumerByHandler: map[string]string{
		"billing-0": "billing", "billing-1": "billing", "billing-2": "billing",
	}}},
}

// Three router handlers on one durable RabbitMQ queue compete for its messages, and the two
// copies of an order often land on two of them.
func TestCompetingHandlersOnOneRabbitMQQueue(t *testing.T) {
	for _, c := range competingConfigs {
		t.Run(c.name, func(t *testing.T) {
			amqpURL := testenv.AMQPURL(t)
			b := pgxBackend(t)
			queue := chaosQueue(t, amqpURL, testenv.Name("competing"))
			config := amqp.NewDurableQueueConfig(amqpURL)
			var handlers []consumerHandler
			for i := range 3 {
				sub, err := amqp.NewSubscriber(config, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Close() })
				handlers = append(handlers, consumerHandler{fmt.Sprintf("billing-%d", i), "billing", queue.name, sub})
			}
			run, err := startConsumers(t, b, c.config, handlers)
			if err != nil {
				wantRefused(t, b, err)
				return
			}
			publisher, err := amqp.NewPublisher(config, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			defer publisher.Close()
			if err := publisher.Publish(queue.name, orderCopies()...); err != nil {
				t.Fatal(err)
			}
			run.waitAcked(t, consumerOrders*consumerCopies)
			run.wantEffects(t, "billing")
		})
	}
}

// Three handlers, each a member of one Redis Streams consumer group, compete for the
// stream's entries.
func TestCompetingHandlersInARedisStreamsGroup(t *testing.T) {
	for _, c := range competingConfigs {
		t.Run(c.name, func(t *testing.T) {
			addr := testenv.RedisAddr(t)
			b := pgxBackend(t)
			stream := testenv.Name("competing")
			t.Cleanup(func() {
				client := redis.NewClient(&redis.Options{Addr: addr})
				defer client.Close()
				_ = client.Del(context.WithoutCancel(context.Background()), stream).Err()
			})
			var handlers []consumerHandler
			for i := range 3 {
				name := fmt.Sprintf("billing-%d", i)
				sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
					Client:        redis.NewClient(&redis.Options{Addr: addr}),
					ConsumerGroup: "billing",
					Consumer:      name,
				}, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Close() })
				handlers = append(handlers, consumerHandler{name, "billing", stream, sub})
			}
			run, err := startConsumers(t, b, c.config, handlers)
			if err != nil {
				wantRefused(t, b, err)
				return
			}
			publisher, err := redisstream.NewPublisher(redisstream.PublisherConfig{
				Client: redis.NewClient(&redis.Options{Addr: addr}),
			}, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			defer publisher.Close()
			if err := publisher.Publish(stream, orderCopies()...); err != nil {
				t.Fatal(err)
			}
			run.waitAcked(t, consumerOrders*consumerCopies)
			run.wantEffects(t, "billing")
		})
	}
}

// Two handlers each with a queue of their own, bound to one fanout exchange: each must
// process every order once, so each is a consumer of its own.
func TestFanOutHandlersOnRabbitMQ(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	b := pgxBackend(t)
	topic := testenv.Name("fanout")
	cleanupFanOut(t, amqpURL, topic, "billing", "audit")
	var handlers []consumerHandler
	var publisher *amqp.Publisher
	for _, name := range []string{"billing", "audit"} {
		config := amqp.NewDurablePubSubConfig(amqpURL, amqp.GenerateQueueNameTopicNameWithSuffix(name))
		sub, err := amqp.NewSubscriber(config, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		handlers = append(handlers, consumerHandler{name, name, topic, sub})
		if publisher == nil {
			if publisher, err = amqp.NewPublisher(config, watermill.NopLogger{}); err != nil {
				t.Fatal(err)
			}
			defer publisher.Close()
		}
	}
	// The one line fan-out needs: a consumer per handler.
	config := inbox.Config{ConsumerByHandler: map[string]string{"billing": "billing", "audit": "audit"}}
	run, err := startConsumers(t, b, config, handlers)
	if err != nil {
		t.Fatal(err)
	}
	if err := publisher.Publish(topic, orderCopies()...); err != nil {
		t.Fatal(err)
	}
	run.waitAcked(t, 2*consumerOrders*consumerCopies)
	run.wantEffects(t, "billing", "audit")
}

// cleanupFanOut deletes, when the test ends, the exchange of topic and the queues of its
// handlers that watermill-amqp's pub/sub configuration declares.
func cleanupFanOut(t *testing.T, amqpURL, topic string, handlers ...string) {
	t.Cleanup(func() {
		conn, err := amqp091.Dial(amqpURL)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, h := range handlers {
			_, _ = ch.QueueDelete(amqp.GenerateQueueNameTopicNameWithSuffix(h)(topic), false, false, false)
		}
		_ = ch.ExchangeDelete(topic, false, false)
	})
}

// A handler renamed between two deploys gets the messages its old name processed again (an
// outbox relay restarting, a replay): they must have no second effect, or be refused before
// any.
func TestRenamedHandlerBetweenDeploys(t *testing.T) {
	for _, c := range []struct {
		name string
		// config is the inbox configuration of both deploys; refused says that the second,
		// with the renamed handler, must refuse every message.
		config  inbox.Config
		refused bool
	}{
		{"zero Config", inbox.Config{}, false},
		{"Consumer", inbox.Config{Consumer: "billing"}, false},
		{"ConsumerByHandler with the new name", inbox.Config{ConsumerByHandler: map[string]string{
			"billing": "billing", "invoicing": "billing",
		}}, false},
		{"ConsumerByHandler without the new name", inbox.Config{ConsumerByHandler: map[string]string{
			"billing": "billing",
		}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			amqpURL := testenv.AMQPURL(t)
			b := pgxBackend(t)
			queue := chaosQueue(t, amqpURL, testenv.Name("renamed"))
			config := amqp.NewDurableQueueConfig(amqpURL)
			publisher, err := amqp.NewPublisher(config, watermill.NopLogger{})
			if err != nil {
				t.Fatal(err)
			}
			defer publisher.Close()
			deploy := func(handler string) (*consumerRun, error) {
				sub, err := amqp.NewSubscriber(config, watermill.NopLogger{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Close() })
				return startConsumers(t, b, c.config, []consumerHandler{{handler, "billing", queue.name, sub}})
			}
			var orders []*message.Message
			for i := range consumerOrders {
				orders = append(orders, message.NewMessage(fmt.Sprintf("order-%04d", i), []byte("{}")))
			}

			first, err := deploy("billing")
			if err != nil {
				wantRefused(t, b, err)
				return
			}
			if err := publisher.Publish(queue.name, orders...); err != nil {
				t.Fatal(err)
			}
			first.waitAcked(t, consumerOrders)
			first.stop(t)

			second, err := deploy("invoicing")
			if err != nil {
				t.Fatal(err)
			}
			if err := publisher.Publish(queue.name, orders...); err != nil {
				t.Fatal(err)
			}
			if c.refused {
				second.waitRefused(t, "invoicing")
			} else {
				second.waitAcked(t, consumerOrders)
			}
			second.stop(t)
			first.wantEffects(t, "billing")
			wantRows(t, "claims under another consumer", b.rows(t, b.table, "WHERE consumer <> ?", "billing"), 0)
		})
	}
}

// waitRefused waits until the message of every order was refused at least once with
// inbox.ErrNoConsumer naming handler, and none was acked.
func (r *consumerRun) waitRefused(t *testing.T, handler string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		refused, other := 0, map[string]int{}
		for reason, n := range r.nacks {
			if strings.Contains(reason, inbox.ErrNoConsumer.Error()) && strings.Contains(reason, fmt.Sprintf("%q", handler)) {
				refused += n
			} else {
				other[reason] = n
			}
		}
		acked := r.acked
		r.mu.Unlock()
		if acked > 0 || len(other) > 0 {
			t.Fatalf("%d deliveries acked, other failures %v: want every message refused with inbox.ErrNoConsumer", acked, other)
		}
		if refused >= consumerOrders {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals, want at least %d", refused, consumerOrders)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/inboxkit/watermill-inbox"
)

// routerRun is a message.Router on gochannel whose billing handler writes one invoice per
// order through the inbox transaction and fails its first attempt at every order after
// writing, as a handler that calls a flaky service after its insert would.
type routerRun struct {
	b       *backend
	pubSub  *gochannel.GoChannel
	poison  <-chan *message.Message
	mu      sync.Mutex
	attempt map[string]int
}

// order is how the middlewares are stacked: the first runs outermost.
type stacking func(inboxMW, retry, poison message.HandlerMiddleware) []message.HandlerMiddleware

func startRouter(t *testing.T, b *backend, stack stacking) *routerRun {
	t.Helper()
	logger := watermill.NopLogger{}
	r := &routerRun{b: b, attempt: map[string]int{}}
	r.pubSub = gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 64}, logger)
	t.Cleanup(func() { r.pubSub.Close() })
	poison, err := r.pubSub.Subscribe(context.Background(), "orders_poison")
	if err != nil {
		t.Fatal(err)
	}
	r.poison = poison

	inboxMW, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: 3, InitialInterval: time.Millisecond, Multiplier: 1}
	poisonMW, err := middleware.PoisonQueueWithFilter(r.pubSub, "orders_poison", inbox.Poisonous)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	router.AddMiddleware(stack(inboxMW, retry.Middleware, poisonMW)...)
	router.AddConsumerHandler("billing", "orders", r.pubSub, r.handle)
	runRouter(t, router)
	return r
}

// runRouter runs router until the test ends.
func runRouter(t *testing.T, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := router.Run(ctx); err != nil {
			t.Errorf("router: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-router.Running()
}

func (r *routerRun) handle(msg *message.Message) error {
	ctx := msg.Context()
	tx, ok := r.b.inTx(ctx)
	if !ok {
		return errors.New("no inbox transaction")
	}
	if err := tx.exec(ctx, "INSERT INTO "+r.b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempt[msg.UUID]++
	if r.attempt[msg.UUID] == 1 {
		return errors.New("invoice mailer timed out")
	}
	return nil
}

// publishAndWait publishes every order twice and waits until each is claimed.
func (r *routerRun) publishAndWait(t *testing.T, orders int) []string {
	t.Helper()
	var keys []string
	for range orders {
		keys = append(keys, watermill.NewUUID())
	}
	for range 2 {
		for _, key := range keys {
			if err := r.pubSub.Publish("orders", message.NewMessage(key, []byte(`{}`))); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "all orders claimed", func() bool { return r.b.rows(t, r.b.table, "") == orders })
	return keys
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The README's order: the poison queue, then Retry, then the inbox innermost, so that every retry
// runs in a fresh transaction and a message that cannot be claimed ends in the poison queue.
func TestRouterRecommendedMiddlewareOrder(t *testing.T) {
	for _, name := range []string{"pgx/postgres", "database-sql/sqlite"} {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			r := startRouter(t, b, func(inboxMW, retry, poison message.HandlerMiddleware) []message.HandlerMiddleware {
				return []message.HandlerMiddleware{poison, retry, inboxMW}
			})
			const orders = 25
			keys := r.publishAndWait(t, orders)
			for _, key := range keys {
				wantRows(t, "invoices of "+key, b.invoices(t, "billing", key), 1)
			}

			// A message without a UUID cannot be claimed: it is not acked unprocessed, it
			// is moved to the poison queue with the reason.
			if err := r.pubSub.Publish("orders", message.NewMessage("", []byte(`{}`))); err != nil {
				t.Fatal(err)
			}
			select {
			case msg := <-r.poison:
				msg.Ack()
				if reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey); !strings.Contains(reason, inbox.ErrInvalidKey.Error()) {
					t.Errorf("poisoned with reason %q, want ErrInvalidKey", reason)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the message without a UUID did not reach the poison queue")
			}
			wantRows(t, "invoices", b.rows(t, b.business, ""), orders)
		})
	}
}

// Why the order matters: with Retry inside the inbox, the retry runs in the transaction
// of the failed attempt, whose writes were never rolled back, so they commit twice.
func TestRouterRetryInsideInboxDoublesWrites(t *testing.T) {
	b := backends["database-sql/sqlite"](t)
	r := startRouter(t, b, func(inboxMW, retry, poison message.HandlerMiddleware) []message.HandlerMiddleware {
		return []message.HandlerMiddleware{poison, inboxMW, retry}
	})
	const orders = 10
	keys := r.publishAndWait(t, orders)
	waitFor(t, "invoices committed", func() bool { return b.rows(t, b.business, "") >= 2*orders })
	perOrder := make([]int, 0, orders)
	for _, key := range keys {
		perOrder = append(perOrder, b.invoices(t, "billing", key))
	}
	if slices.Max(perOrder) != 2 || slices.Min(perOrder) != 2 {
		t.Errorf("invoices per order with Retry inside the inbox: %v, want 2 each (the failed attempt's write kept)", perOrder)
	}
}

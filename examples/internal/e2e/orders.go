package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/billing"
)

// makeOrders returns the orders and their messages (each order 1 to maxCopies times), in a
// random order, so that copies of one order travel at different times and at the same time.
func makeOrders(t *testing.T, n, maxCopies int) ([]billing.OrderPlaced, []*message.Message) {
	seed := rand.Uint64()
	t.Logf("order seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	orders := make([]billing.OrderPlaced, n)
	var msgs []*message.Message
	for i := range orders {
		orders[i] = billing.OrderPlaced{OrderID: watermill.NewUUID(), AmountCents: int64(1 + rng.IntN(100000))}
		for range 1 + rng.IntN(maxCopies) {
			msg, err := billing.NewOrderMessage(orders[i])
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, msg)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	return orders, msgs
}

// publish sends msgs from four goroutines at once and reports the first error, or nil when
// all are sent.
func publish(pub message.Publisher, topic string, msgs []*message.Message) <-chan error {
	done := make(chan error, 1)
	next := make(chan *message.Message)
	go func() {
		defer close(next)
		for _, m := range msgs {
			next <- m
		}
	}()
	go func() {
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		for range 4 {
			wg.Go(func() {
				for m := range next {
					if err := pub.Publish(topic, m); err != nil {
						once.Do(func() { first = err })
					}
				}
			})
		}
		wg.Wait()
		done <- first
	}()
	return done
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, missing ...*string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			why := ""
			for _, m := range missing {
				why = ": " + *m
			}
			buf := make([]byte, 8<<20)
			buf = buf[:runtime.Stack(buf, true)]
			dump := filepath.Join(os.TempDir(), fmt.Sprintf("e2e-%s-goroutines.txt", strings.ReplaceAll(t.Name(), "/", "_")))
			_ = os.WriteFile(dump, buf, 0o644)
			t.Fatalf("timed out after %s waiting for %s%s (goroutines: %s)", timeout, what, why, dump)
		}
		<-tick.C
	}
}

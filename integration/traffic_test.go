package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Traffic for the tests of replicated databases: orders published as several copies,
// delivered at once to the stores of several consumer instances, each until it is acked.

// trafficRun counts what the handlers and deliveries of one run saw.
type trafficRun struct {
	runs        atomic.Int64 // handler runs
	badAcks     atomic.Int64 // acks without the claim and one invoice committed
	firstBadAck atomic.Pointer[error]

	mu       sync.Mutex
	nacks    []error
	maxNacks int         // the most nacks one delivery took before its ack
	acks     []time.Time // when each delivery was acked
}

// longestWait returns the longest time after since without an ack.
func (run *trafficRun) longestWait(since time.Time) time.Duration {
	run.mu.Lock()
	defer run.mu.Unlock()
	acks := slices.Clone(run.acks)
	slices.SortFunc(acks, time.Time.Compare)
	var longest time.Duration
	last := since
	for _, at := range acks {
		if at.After(last) {
			longest = max(longest, at.Sub(last))
			last = at
		}
	}
	return longest
}

// deliverCopies delivers copies[key] copies of every key until each is acked, from workers
// goroutines: the copies of one key at the same moment, each to the handler of another
// consumer instance (its own store, on a node or pool of its own). afterAck, if set, is
// called with the number of keys whose copies were all acked so far.
func (run *trafficRun) deliverCopies(t *testing.T, handlers []message.HandlerFunc, keys []string, copies map[string]int,
	workers int, afterAck func(done int),
) {
	t.Helper()
	queue := make(chan string)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for key := range queue {
				first := rand.IntN(len(handlers))
				start := make(chan struct{})
				var copiesWG sync.WaitGroup
				for i := range copies[key] {
					h := handlers[(first+i)%len(handlers)]
					copiesWG.Go(func() {
						<-start
						if nacks := deliverUntilAcked(t, h, key); len(nacks) > 0 {
							run.mu.Lock()
							run.nacks = append(run.nacks, nacks...)
							run.maxNacks = max(run.maxNacks, len(nacks))
							run.mu.Unlock()
						}
					})
				}
				close(start)
				copiesWG.Wait()
				if n := done.Add(1); afterAck != nil {
					afterAck(int(n))
				}
			}
		})
	}
	for _, key := range keys {
		queue <- key
	}
	close(queue)
	wg.Wait()
}

// checkingAcks wraps h so that each ack is recorded and checked: committed, read after the
// ack, must return one claim and one invoice of the message; an error of committed is
// retried until it has been failing for 30 s (a database failing over), then counted.
func (run *trafficRun) checkingAcks(h message.HandlerFunc,
	committed func(ctx context.Context, key string) (claims, invoices int, err error),
) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err != nil {
			return out, err
		}
		run.mu.Lock()
		run.acks = append(run.acks, time.Now())
		run.mu.Unlock()
		ctx := context.WithoutCancel(msg.Context())
		deadline := time.Now().Add(30 * time.Second)
		claims, invoices, err := committed(ctx, msg.UUID)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the database is back in about a second
			claims, invoices, err = committed(ctx, msg.UUID)
		}
		if claims != 1 || invoices != 1 || err != nil {
			run.badAcks.Add(1)
			bad := fmt.Errorf("%s acked with %d claims and %d invoices committed (%v)", msg.UUID, claims, invoices, err)
			run.firstBadAck.CompareAndSwap(nil, &bad)
		}
		return out, nil
	}
}

// firstAckAfter returns the time of the first ack after since (zero: none).
func (run *trafficRun) firstAckAfter(since time.Time) time.Time {
	run.mu.Lock()
	defer run.mu.Unlock()
	var first time.Time
	for _, at := range run.acks {
		if at.After(since) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// newOrders returns n order keys, each with 1 to maxCopies copies.
func newOrders(n, maxCopies int) (keys []string, copies map[string]int, total int) {
	copies = map[string]int{}
	for range n {
		key := watermill.NewUUID()
		keys = append(keys, key)
		copies[key] = 1 + rand.IntN(maxCopies)
		total += copies[key]
	}
	return keys, copies, total
}

package e2e

import (
	"context"
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/billing"
)

// dropper plays a consumer that dies after its handler committed but before the broker got
// the ack: for a few deliveries it hands the router a copy of the message, so the router's
// ack never reaches the broker, which still holds the original as in flight.
type dropper struct {
	after, limit int
	eligible     func(orderID string) bool
	done         chan struct{}

	mu      sync.Mutex
	seen    int
	dropped []string // order IDs
	settled int      // copies the router acked or nacked
}

// newDropper drops the acks of limit deliveries of eligible orders, after letting the first
// `after` deliveries through.
func newDropper(after, limit int, eligible func(orderID string) bool) *dropper {
	return &dropper{after: after, limit: limit, eligible: eligible, done: make(chan struct{})}
}

func (d *dropper) stop() { close(d.done) }

func (d *dropper) shouldDrop(msg *message.Message) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen++
	if d.seen <= d.after || len(d.dropped) >= d.limit {
		return false
	}
	order, err := billing.DecodeOrder(msg)
	if err != nil || !d.eligible(order.OrderID) || slices.Contains(d.dropped, order.OrderID) {
		return false
	}
	d.dropped = append(d.dropped, order.OrderID)
	return true
}

func (d *dropper) settle(msg *message.Message) {
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-d.done:
		return
	}
	d.mu.Lock()
	d.settled++
	d.mu.Unlock()
}

func (d *dropper) settledCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

func (d *dropper) droppedIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dropped...)
}

// dropSubscriber is a subscriber whose messages pass through a dropper.
type dropSubscriber struct {
	message.Subscriber
	d *dropper
}

func (s dropSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			if s.d.shouldDrop(msg) {
				copied := msg.Copy()
				copied.SetContext(msg.Context())
				go s.d.settle(copied)
				msg = copied // the original is never acked
			}
			out <- msg
		}
	}()
	return out, nil
}

package layertest

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/billing"
)

// What the data layers' handlertest cases share: the message they deliver, and the handler
// shapes handlertest.Case takes.

// OrderMessage is the message the cases deliver: order-1's OrderPlaced, whose UUID is the
// order ID.
func OrderMessage(t *testing.T) *message.Message {
	t.Helper()
	msg, err := billing.NewOrderMessage(billing.OrderPlaced{OrderID: "order-1", AmountCents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// KitHandler makes an example's handler, which returns only an error, the
// message.HandlerFunc of handlertest.Case.Handler.
func KitHandler(handle func(*message.Message) error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, handle(msg) }
}

// QueueHandler is the handler of a data layer in write-behind mode: it decodes the order and
// queues its invoice with queue, the example's inbox.ExecAtCommit path.
func QueueHandler(queue func(ctx context.Context, order billing.OrderPlaced) error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		order, err := billing.DecodeOrder(msg)
		if err != nil {
			return nil, err
		}
		return nil, queue(msg.Context(), order)
	}
}

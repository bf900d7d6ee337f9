// Package billing is the event the data-layer examples and the broker tests handle: an
// OrderPlaced, carried as JSON, whose message UUID is the order ID. The example programs do
// not import it: each carries its own copy of the event and of its handler, so that a copy
// of one program builds on its own.
package billing

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// OrderPlaced is the event: the payload of every message, as JSON.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// NewOrderMessage returns a message carrying order. Its UUID is the order ID, so every copy
// of one order (a producer retry, a broker redelivery) has the same idempotency key.
func NewOrderMessage(order OrderPlaced) (*message.Message, error) {
	payload, err := json.Marshal(order)
	if err != nil {
		return nil, fmt.Errorf("billing: marshal order %q: %w", order.OrderID, err)
	}
	return message.NewMessage(order.OrderID, payload), nil
}

// DecodeOrder reads the OrderPlaced in msg's payload.
func DecodeOrder(msg *message.Message) (OrderPlaced, error) {
	var order OrderPlaced
	if err := json.Unmarshal(msg.Payload, &order); err != nil {
		return OrderPlaced{}, fmt.Errorf("billing: decode message %q: %w", msg.UUID, err)
	}
	if order.OrderID == "" {
		return OrderPlaced{}, fmt.Errorf("billing: message %q has no order_id", msg.UUID)
	}
	return order, nil
}

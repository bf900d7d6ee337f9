package main

import (
	"bytes"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestGoChannel: copies race in their own goroutines, and a nack is redelivered at once.
// There is no restart: an in-memory channel keeps nothing across one.
func TestGoChannel(t *testing.T) {
	pool := e2e.Pool(t)
	pubSub := newPubSub()
	t.Cleanup(func() { _ = pubSub.Close() })
	e2e.Run(t, pool, e2e.Scenario{
		Topic:         testenv.Name("orders"),
		Publisher:     pubSub,
		NewSubscriber: func(*testing.T) message.Subscriber { return pubSub },
	})
}

// TestGoChannelProgram runs the program as .ci/run does, with few orders: its own handler, behind the
// recommended stack, writes one invoice per order (run fails otherwise, or if it cannot
// remove what it created).
func TestGoChannelProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

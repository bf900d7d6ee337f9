package main

import (
	"bytes"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/examples/internal/e2e"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestSQL: PostgreSQL is the broker (watermill-sql v4). One consumer reads in order; a nack
// is delivered again, and the batch the first consumer had not acked when it stopped is
// read again by the next one.
func TestSQL(t *testing.T) {
	pool := e2e.Pool(t)
	topic := testenv.Name("orders")
	e2e.DropTable(t, pool, "watermill_"+topic)
	e2e.DropTable(t, pool, "watermill_offsets_"+topic)

	publisher, err := newPublisher(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })
	e2e.Run(t, pool, e2e.Scenario{
		Topic:     topic,
		Publisher: publisher,
		NewSubscriber: func(t *testing.T) message.Subscriber {
			sub, err := newSubscriber(pool)
			if err != nil {
				t.Fatal(err)
			}
			return sub
		},
		Crashes: 1,
	})
}

// TestSQLProgram runs the program as .ci/run does, with few orders: its own handler, behind the
// recommended stack, writes one invoice per order (run fails otherwise, or if it cannot
// remove what it created).
func TestSQLProgram(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), testenv.PostgresURL(t), 20, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
}

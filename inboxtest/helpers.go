package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Deliver hands h a message with UUID key, no payload and context ctx, as a router would,
// and returns the handler's error: nil is an ack, an error a nack.
func Deliver(ctx context.Context, h message.HandlerFunc, key string) error {
	msg := message.NewMessage(key, nil)
	msg.SetContext(ctx)
	_, err := h(msg)
	return err
}

// DeliverUntilAcked delivers key again after each error, as a broker redelivers a nacked
// message, with a growing pause, for up to a minute; it returns the errors seen before the
// ack, and fails t if none came.
func DeliverUntilAcked(t *testing.T, h message.HandlerFunc, key string) []error {
	t.Helper()
	var nacks []error
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := Deliver(context.Background(), h, key)
		if err == nil {
			return nacks
		}
		nacks = append(nacks, err)
		if time.Now().After(deadline) {
			t.Errorf("message %q still nacked after %d deliveries: %v", key, len(nacks), err)
			return nacks
		}
		time.Sleep(time.Duration(len(nacks)) * 5 * time.Millisecond) // the broker's redelivery backoff
	}
}

// WantRows fails t unless got, a row count of what, is want.
func WantRows(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d rows, want %d", what, got, want)
	}
}

// DollarPlaceholders turns the ? placeholders of query into PostgreSQL's $1, $2, ...; the
// suite's own SQL has no ? anywhere else.
func DollarPlaceholders(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

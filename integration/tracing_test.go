package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxotel"
)

// The middleware's spans, read with the SDK's in-memory exporter: one inbox.message span per
// delivery under the span of the message's context, with claim, handler and commit spans
// under it, the handler's own spans under inbox.handler, and the outcome as an attribute.
func TestSpans(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		name := map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind]
		t.Run(name, func(t *testing.T) {
			b := backends["database-sql/sqlite"](t)
			exporter := tracetest.NewInMemoryExporter()
			provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
			t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
			config := inbox.Config{Consumer: "billing", TracerProvider: provider, WriteBehind: writeBehind}
			mw, err := inbox.NewMiddleware(b.store, config, nil)
			if err != nil {
				t.Fatal(err)
			}
			errPayment := errors.New("payment provider down")
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				_, span := provider.Tracer("app").Start(msg.Context(), "create invoice")
				span.End()
				if msg.UUID == "fails" {
					return nil, errPayment
				}
				return nil, nil
			})
			wantOutcomes := []string{"processed", "duplicate", "rolled_back"}
			for _, key := range []string{"a", "a", "fails"} {
				ctx, parent := provider.Tracer("subscriber").Start(context.Background(), "receive "+key)
				msg := message.NewMessage(key, nil)
				msg.SetContext(ctx)
				_, _ = h(msg)
				parent.End()
			}

			spans := exporter.GetSpans()
			byID := map[string]tracetest.SpanStub{}
			for _, s := range spans {
				byID[s.SpanContext.SpanID().String()] = s
			}
			parentName := func(s tracetest.SpanStub) string { return byID[s.Parent.SpanID().String()].Name }
			var outcomes []string
			children := map[string]int{}
			for _, s := range spans {
				switch s.Name {
				case inboxotel.SpanMessage:
					if got := parentName(s); !strings.HasPrefix(got, "receive ") {
						t.Errorf("inbox.message's parent is %q, want the message context's span", got)
					}
					attrs := attribute.NewSet(s.Attributes...)
					outcome, _ := attrs.Value("inbox.outcome")
					outcomes = append(outcomes, outcome.AsString())
					if consumer, _ := attrs.Value("consumer"); consumer.AsString() != "billing" {
						t.Errorf("consumer attribute %q", consumer.AsString())
					}
					if outcome.AsString() == "rolled_back" && s.Status.Code != codes.Error {
						t.Errorf("the failed delivery's span has status %v, want Error", s.Status.Code)
					}
				case "create invoice":
					if got := parentName(s); got != inboxotel.SpanHandler {
						t.Errorf("the handler's span is under %q, want %s", got, inboxotel.SpanHandler)
					}
				default:
					if got := parentName(s); got == inboxotel.SpanMessage {
						children[s.Name]++
					}
				}
			}
			if len(outcomes) != 3 || outcomes[0] != wantOutcomes[0] || outcomes[1] != wantOutcomes[1] || outcomes[2] != wantOutcomes[2] {
				t.Errorf("outcomes %v, want %v", outcomes, wantOutcomes)
			}
			handlerRuns := 2 // first delivery and the failing one
			if writeBehind {
				handlerRuns = 3 // the duplicate runs the handler too
			}
			if children[inboxotel.SpanHandler] != handlerRuns || children[inboxotel.SpanCommit] != 1+map[bool]int{false: 0, true: 1}[writeBehind] {
				t.Errorf("child spans %v", children)
			}
			if !writeBehind && children[inboxotel.SpanClaim] != 3 {
				t.Errorf("claim spans %d, want 3", children[inboxotel.SpanClaim])
			}
		})
	}
}

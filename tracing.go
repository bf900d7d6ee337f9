package inbox

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The OpenTelemetry spans the middleware starts, from the tracer named MeterName.
// SpanMessage is a child of the span in the message's context (if any) and the parent of the
// others; it carries the attributes "consumer", "handler", "messaging.message.id",
// "inbox.key" and "inbox.outcome" ("processed", "duplicate", "rolled_back" or "failed").
// A span whose step failed has status Error and the error recorded as an event.
const (
	// SpanMessage covers the whole message in the middleware.
	SpanMessage = "inbox.message"
	// SpanClaim covers BEGIN and the claim (claim-first mode).
	SpanClaim = "inbox.claim"
	// SpanHandler covers the handler; the handler's own spans are its children.
	SpanHandler = "inbox.handler"
	// SpanCommit covers the queued writes, the record of produced messages and COMMIT; in
	// write-behind mode the claim too.
	SpanCommit = "inbox.commit"
	// SpanPublish covers publishing what the handler published through a Publisher.
	SpanPublish = "inbox.publish"
)

// end ends the delivery's span with its attributes and outcome.
func (d *delivery) end(err error) {
	if !d.span.IsRecording() {
		d.span.End()
		return
	}
	if err != nil && d.outcome == "" {
		d.outcome = "failed"
	}
	d.span.SetAttributes(
		attribute.String("consumer", d.claim.Consumer),
		attribute.String("handler", d.handler),
		attribute.String("messaging.message.id", d.msg.UUID),
		attribute.String("inbox.key", d.claim.Key),
		attribute.String("inbox.outcome", d.outcome),
	)
	endSpan(d.span, err)
}

func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

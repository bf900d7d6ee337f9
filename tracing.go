package inbox

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
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

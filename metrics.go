package inbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The OpenTelemetry instruments the middleware records, on the meter named MeterName. Every
// measurement carries the attributes "consumer" and "handler" (the router handler's name,
// "" outside a router); inbox.messages.failed carries "stage" too.
const (
	// MeterName names the middleware's meter and its tracer (see SpanMessage).
	MeterName = "github.com/inboxkit/watermill-inbox"

	// MetricProcessed counts messages whose handler ran and whose transaction committed.
	MetricProcessed = "inbox.messages.processed"
	// MetricDuplicates counts messages skipped because their key was already committed.
	MetricDuplicates = "inbox.messages.duplicates"
	// MetricRolledBack counts handler runs that failed or panicked and were rolled back.
	MetricRolledBack = "inbox.messages.rolled_back"
	// MetricFingerprintMismatches counts duplicates whose payload fingerprint differed.
	MetricFingerprintMismatches = "inbox.fingerprint.mismatches"
	// MetricSkipped counts messages acked without a claim because Config.Skip returned
	// true; its "consumer" attribute is "".
	MetricSkipped = "inbox.messages.skipped"
	// MetricFailed counts messages nacked by the inbox itself; "stage" says where: "key"
	// (no key or consumer), "claim" (begin or claim failed), "commit" or "publish" (publishing
	// what a handler published through a Publisher).
	MetricFailed = "inbox.messages.failed"
	// MetricClaimDuration is the time from BEGIN to the claim's answer, in seconds.
	MetricClaimDuration = "inbox.claim.duration"
	// MetricTransactionDuration is the time from BEGIN to the end of COMMIT, in seconds.
	MetricTransactionDuration = "inbox.transaction.duration"
	// MetricRowsCleaned counts inbox rows deleted by retention (sqlinbox's Cleanup), with the
	// attribute "table" instead of consumer and handler.
	MetricRowsCleaned = "inbox.cleanup.rows_deleted"
)

type metrics struct {
	processed, duplicates, rolledBack, mismatches, failed, skipped metric.Int64Counter
	claimDuration, txDuration                                      metric.Float64Histogram

	// attributes caches one attribute set per (consumer, handler), so that recording a
	// message allocates nothing.
	attributes sync.Map
}

type attributeKey struct{ consumer, handler string }

func newMetrics(provider metric.MeterProvider) (*metrics, error) {
	meter := provider.Meter(MeterName)
	m := &metrics{}
	var err error
	counter := func(dst *metric.Int64Counter, name, description string) {
		if err == nil {
			*dst, err = meter.Int64Counter(name, metric.WithDescription(description), metric.WithUnit("{message}"))
		}
	}
	histogram := func(dst *metric.Float64Histogram, name, description string) {
		if err == nil {
			*dst, err = meter.Float64Histogram(name, metric.WithDescription(description), metric.WithUnit("s"))
		}
	}
	counter(&m.processed, MetricProcessed, "Messages processed: handler ran, transaction committed")
	counter(&m.duplicates, MetricDuplicates, "Messages skipped as duplicates of a committed key")
	counter(&m.rolledBack, MetricRolledBack, "Handler runs that failed or panicked and were rolled back")
	counter(&m.mismatches, MetricFingerprintMismatches, "Duplicates whose payload fingerprint differed")
	counter(&m.skipped, MetricSkipped, "Messages acked without a claim because Config.Skip returned true")
	counter(&m.failed, MetricFailed, "Messages nacked by the inbox (no key, claim or commit failed)")
	histogram(&m.claimDuration, MetricClaimDuration, "Time from BEGIN to the claim's answer")
	histogram(&m.txDuration, MetricTransactionDuration, "Time from BEGIN to the end of COMMIT")
	if err != nil {
		return nil, fmt.Errorf("inbox: create metrics: %w", err)
	}
	return m, nil
}

// measurementOptions are the option lists of one attribute set, built once: passing a
// fresh option to Add or Record allocates its list every time.
type measurementOptions struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func (m *metrics) attrs(consumer, handler string) *measurementOptions {
	key := attributeKey{consumer, handler}
	if cached, ok := m.attributes.Load(key); ok {
		return cached.(*measurementOptions)
	}
	option := metric.WithAttributeSet(attribute.NewSet(
		attribute.String("consumer", consumer), attribute.String("handler", handler)))
	options := &measurementOptions{add: []metric.AddOption{option}, record: []metric.RecordOption{option}}
	m.attributes.Store(key, options)
	return options
}

func (m *metrics) fail(ctx context.Context, consumer, handler, stage string) {
	m.failed.Add(ctx, 1, metric.WithAttributes(
		attribute.String("consumer", consumer), attribute.String("handler", handler), attribute.String("stage", stage)))
}

func seconds(since time.Time) float64 { return time.Since(since).Seconds() }

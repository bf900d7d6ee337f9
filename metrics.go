package inbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/inboxkit/watermill-inbox/inboxotel"
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
	meter := provider.Meter(inboxotel.ScopeName)
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
	counter(&m.processed, inboxotel.MetricProcessed, "Messages processed: handler ran, transaction committed")
	counter(&m.duplicates, inboxotel.MetricDuplicates, "Messages skipped as duplicates of a committed key")
	counter(&m.rolledBack, inboxotel.MetricRolledBack, "Handler runs that failed or panicked and were rolled back")
	counter(&m.mismatches, inboxotel.MetricFingerprintMismatches, "Duplicates whose payload fingerprint differed")
	counter(&m.skipped, inboxotel.MetricSkipped, "Messages acked without a claim because Config.Skip returned true")
	counter(&m.failed, inboxotel.MetricFailed, "Messages nacked by the inbox (no key, claim or commit failed)")
	histogram(&m.claimDuration, inboxotel.MetricClaimDuration, "Time from BEGIN to the claim's answer")
	histogram(&m.txDuration, inboxotel.MetricTransactionDuration, "Time from BEGIN to the end of COMMIT")
	if err != nil {
		return nil, fmt.Errorf("inbox: create metrics: %w", err)
	}
	return m, nil
}

// measurementOptions are the option lists of one attribute set, built once: passing a
// fresh option to Add or [Record] allocates its list every time.
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

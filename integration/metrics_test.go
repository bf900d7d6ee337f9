package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The middleware's OpenTelemetry metrics, read with the SDK's manual reader after a known
// mix of deliveries on a real store.
func TestMetrics(t *testing.T) {
	b := backends["database-sql/sqlite"](t)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", MeterProvider: provider}, nil)
	if err != nil {
		t.Fatal(err)
	}
	errPayment := errors.New("payment provider down")
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		if msg.UUID == "fails" {
			return nil, errPayment
		}
		return nil, nil
	})
	deliveries := []struct{ key, payload string }{
		{"a", "1"}, {"b", "1"}, {"c", "1"}, // processed
		{"a", "1"}, {"b", "1"}, // duplicates
		{"fails", "1"}, // rolled back
		{"c", "2"},     // fingerprint mismatch, rejected
		{"", "1"},      // no key: failed at stage "key"
	}
	for _, d := range deliveries {
		_ = deliverPayload(h, d.key, d.payload)
	}

	var data metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &data); err != nil {
		t.Fatal(err)
	}
	sums, counts := map[string]int64{}, map[string]uint64{}
	for _, scope := range data.ScopeMetrics {
		if scope.Scope.Name != inbox.MeterName {
			continue
		}
		for _, m := range scope.Metrics {
			switch agg := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range agg.DataPoints {
					if v, _ := p.Attributes.Value("consumer"); v.AsString() != "billing" {
						t.Errorf("%s: consumer attribute %q, want billing", m.Name, v.AsString())
					}
					if m.Name == inbox.MetricFailed {
						if stage, _ := p.Attributes.Value(attribute.Key("stage")); stage.AsString() != "key" {
							t.Errorf("%s: stage %q, want key", m.Name, stage.AsString())
						}
					}
					sums[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range agg.DataPoints {
					counts[m.Name] += p.Count
				}
			}
		}
	}
	for name, want := range map[string]int64{
		inbox.MetricProcessed:             3,
		inbox.MetricDuplicates:            2,
		inbox.MetricRolledBack:            1,
		inbox.MetricFingerprintMismatches: 1,
		inbox.MetricFailed:                1,
	} {
		if sums[name] != want {
			t.Errorf("%s = %d, want %d", name, sums[name], want)
		}
	}
	for name, want := range map[string]uint64{
		inbox.MetricClaimDuration:       7, // every delivery that reached the store
		inbox.MetricTransactionDuration: 3, // every commit
	} {
		if counts[name] != want {
			t.Errorf("%s: %d measurements, want %d", name, counts[name], want)
		}
	}
}

// Retention counts the rows it deletes, per table.
func TestCleanupMetric(t *testing.T) {
	b := backends["database-sql/sqlite"](t)
	for _, key := range []string{"a", "b", "c"} {
		if err := b.direct.exec(context.Background(),
			"INSERT INTO "+b.table+" (consumer, message_id, processed_at) VALUES ('billing', ?, '2000-01-01T00:00:00.000Z')", key); err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	store := b.store.(*sqlinbox.SQLStore)
	deleted, err := store.Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{BatchSize: 2, MeterProvider: provider})
	if err != nil || deleted != 3 {
		t.Fatalf("Cleanup = %d, %v; want 3 rows", deleted, err)
	}
	var data metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &data); err != nil {
		t.Fatal(err)
	}
	var counted int64
	for _, scope := range data.ScopeMetrics {
		for _, m := range scope.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == inbox.MetricRowsCleaned {
				for _, p := range sum.DataPoints {
					if table, _ := p.Attributes.Value("table"); table.AsString() != b.table {
						t.Errorf("table attribute %q, want %q", table.AsString(), b.table)
					}
					counted += p.Value
				}
			}
		}
	}
	if counted != 3 {
		t.Errorf("%s = %d, want 3", inbox.MetricRowsCleaned, counted)
	}
}

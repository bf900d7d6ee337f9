package integration

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxotel"
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
		if scope.Scope.Name != inboxotel.ScopeName {
			continue
		}
		for _, m := range scope.Metrics {
			switch agg := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range agg.DataPoints {
					if v, _ := p.Attributes.Value("consumer"); v.AsString() != "billing" {
						t.Errorf("%s: consumer attribute %q, want billing", m.Name, v.AsString())
					}
					if m.Name == inboxotel.MetricFailed {
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
		inboxotel.MetricProcessed:             3,
		inboxotel.MetricDuplicates:            2,
		inboxotel.MetricRolledBack:            1,
		inboxotel.MetricFingerprintMismatches: 1,
		inboxotel.MetricFailed:                1,
	} {
		if sums[name] != want {
			t.Errorf("%s = %d, want %d", name, sums[name], want)
		}
	}
	for name, want := range map[string]uint64{
		inboxotel.MetricClaimDuration:       7, // every delivery that reached the store
		inboxotel.MetricTransactionDuration: 3, // every commit
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

	store := b.store.(*sqlinbox.Store)
	deleted, err := store.Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{BatchSize: 2, MeterProvider: provider})
	if err != nil || deleted != 3 {
		t.Fatalf("Cleanup = %d, %v; want 3 rows", deleted, err)
	}
	var counted int64
	for _, p := range rowsCleaned(t, reader) {
		if table, _ := p.Attributes.Value("table"); table.AsString() != b.table {
			t.Errorf("table attribute %q, want %q", table.AsString(), b.table)
		}
		counted += p.Value
	}
	if counted != 3 {
		t.Errorf("%s = %d, want 3", inboxotel.MetricRowsDeleted, counted)
	}
}

// countingProvider counts the Int64Counter instruments created through it.
type countingProvider struct {
	metric.MeterProvider
	counters atomic.Int64
}

func (p *countingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return countingMeter{p.MeterProvider.Meter(name, opts...), &p.counters}
}

type countingMeter struct {
	metric.Meter
	counters *atomic.Int64
}

func (m countingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.counters.Add(1)
	return m.Meter.Int64Counter(name, opts...)
}

// RetentionConfig.Cleanup.MeterProvider receives the rows every pass of a runner deletes, on one
// counter the runner creates once, however many passes it runs.
func TestRetentionRunnerMeterProvider(t *testing.T) {
	b := backends["database-sql/sqlite"](t)
	// expire inserts expired claims in one statement, so that no pass sees some of them.
	expire := func(keys ...any) {
		t.Helper()
		values := strings.TrimSuffix(strings.Repeat("('billing', ?, '2000-01-01T00:00:00.000Z'), ", len(keys)), ", ")
		if err := b.direct.exec(context.Background(),
			"INSERT INTO "+b.table+" (consumer, message_id, processed_at) VALUES "+values, keys...); err != nil {
			t.Fatal(err)
		}
	}
	expire("a", "b", "c")
	reader := sdkmetric.NewManualReader()
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	provider := &countingProvider{MeterProvider: sdk}

	passes := make(chan int64, 1024) // rows deleted by each finished pass
	runner, err := sqlinbox.NewRetentionRunner(b.store.(*sqlinbox.Store), sqlinbox.RetentionConfig{
		OlderThan: time.Hour, Interval: time.Millisecond,
		Cleanup: sqlinbox.CleanupConfig{BatchSize: 2, MeterProvider: provider,
			Progress: func(p sqlinbox.CleanupProgress) {
				if p.Done {
					select {
					case passes <- p.Deleted:
					default:
					}
				}
			},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	// The first pass deletes the 3 rows; once a later pass has run, 2 more expire, and a
	// pass after that deletes them.
	wait := func(want int64, what string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case n := <-passes:
				if n == want {
					return
				}
			case <-deadline:
				t.Fatalf("no pass deleted %d rows (%s) within 10 s", want, what)
			}
		}
	}
	wait(3, "the first rows")
	wait(0, "a pass with nothing to do")
	expire("d", "e")
	wait(2, "the rows expired later")

	var counted int64
	for _, p := range rowsCleaned(t, reader) {
		counted += p.Value
	}
	if counted != 5 {
		t.Errorf("%s = %d, want 5", inboxotel.MetricRowsDeleted, counted)
	}
	if n := provider.counters.Load(); n != 1 {
		t.Errorf("the runner created %d counters, want 1 for all its passes", n)
	}
}

// rowsCleaned collects reader and returns the data points of MetricRowsDeleted.
func rowsCleaned(t *testing.T, reader *sdkmetric.ManualReader) []metricdata.DataPoint[int64] {
	t.Helper()
	var data metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &data); err != nil {
		t.Fatal(err)
	}
	var points []metricdata.DataPoint[int64]
	for _, scope := range data.ScopeMetrics {
		for _, m := range scope.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == inboxotel.MetricRowsDeleted {
				points = append(points, sum.DataPoints...)
			}
		}
	}
	return points
}

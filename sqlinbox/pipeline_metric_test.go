package sqlinbox_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// histogramRecorder is a MeterProvider that keeps every value recorded on the Int64Histogram
// named name, with its attributes; every other instrument is a no-op.
type histogramRecorder struct {
	noop.MeterProvider
	name string

	mu     sync.Mutex
	values []int64
	tables []string // each value's attribute "table"
}

func (r *histogramRecorder) Meter(string, ...metric.MeterOption) metric.Meter {
	return recordingMeter{r: r}
}

func (r *histogramRecorder) recorded() (values []int64, tables []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.values), slices.Clone(r.tables)
}

type recordingMeter struct {
	noop.Meter
	r *histogramRecorder
}

func (m recordingMeter) Int64Histogram(name string, _ ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	if name != m.r.name {
		return noop.Int64Histogram{}, nil
	}
	return recordingHistogram{r: m.r}, nil
}

type recordingHistogram struct {
	noop.Int64Histogram
	r *histogramRecorder
}

func (h recordingHistogram) Record(_ context.Context, value int64, options ...metric.RecordOption) {
	set := metric.NewRecordConfig(options).Attributes()
	table, _ := set.Value(attribute.Key("table"))
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.values = append(h.r.values, value)
	h.r.tables = append(h.r.tables, table.AsString())
}

// inbox.pipeline.messages shows coalescing: a delivery that went alone records 1, the five
// that waited behind it while the one connection was busy record 5, each under its table.
func TestPipelineMetricCountsMessagesPerPipeline(t *testing.T) {
	recorder := &histogramRecorder{name: inboxotel.MetricPipelineMessages}
	f := newPipelineFixture(t, sqlinbox.Config{}, sqlinbox.PipelineConfig{Connections: 1, MeterProvider: recorder})
	h := f.handler(t)

	release := f.holdKey(t, "blocker")
	blocked := make(chan error, 1)
	go func() { blocked <- deliver(h, "blocker", "x") }()
	waitFor(t, "the blocker's pipeline", func() bool { return len(f.pipelines()) == 1 })
	var keys, payloads []string
	for i := range 5 {
		keys, payloads = append(keys, "order-"+strconv.Itoa(i)), append(payloads, "cents")
	}
	results := make(chan []error, 1)
	go func() { results <- deliverAll(h, keys, payloads) }()
	waitFor(t, "five messages waiting", func() bool { return sqlinbox.PipelineWaiting(f.store) == 5 })
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker: %v", err)
	}
	for i, err := range <-results {
		if err != nil {
			t.Errorf("%s: %v", keys[i], err)
		}
	}

	values, tables := recorder.recorded()
	if want := []int64{1, 5}; !slices.Equal(values, want) {
		t.Errorf("inbox.pipeline.messages recorded %v, want %v (the blocker alone, then the five)", values, want)
	}
	for _, table := range tables {
		if table != f.table {
			t.Errorf("attribute table %q, want %q", table, f.table)
		}
	}
}

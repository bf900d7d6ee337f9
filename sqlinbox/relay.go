package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/internal/record"
)

// The relay makes the inbox table an outbox too: a record that holds messages is marked
// unpublished in its claim's commit, and the mark is cleared once they have left (see
// [RelaySQL] and inbox.PublishedMarker). A record still unpublished a while after its commit
// lost its publish: the broker failed after the commit, the process died between COMMIT and
// the publish, or the message that produced it was dropped (a broker that discards nacked
// messages, a poison queue) and never comes back for the duplicate that would publish it
// again. The relay publishes those records, under their original UUIDs and metadata, then
// clears their marks.

// Defaults of [RelayConfig].
const (
	// DefaultRelayDelay is [RelayConfig.Delay]'s default.
	DefaultRelayDelay = 30 * time.Second
	// DefaultRelayInterval is [RelayConfig.Interval]'s default.
	DefaultRelayInterval = 10 * time.Second
	// DefaultRelayBatchSize is [RelayConfig.BatchSize]'s default.
	DefaultRelayBatchSize = 100
)

// ErrRelayUnavailable is wrapped by the error of a relay pass on a table without the column
// unpublished (made by an earlier release) or on a dialect without [RelaySQL]. The message
// says how to add the column. The table works as before for everything else: claims,
// duplicates (which publish their record again) and retention.
var ErrRelayUnavailable = errors.New("sqlinbox: the inbox table keeps no unpublished marks, which the relay needs")

// RelayConfig configures a [RelayRunner].
type RelayConfig struct {
	// Publisher publishes the records, each message to the topic it was recorded with: the
	// one a handler published it to through an inbox.Publisher, or its router handler's
	// publish topic for a message it returned. Required. Give it the publisher the handlers
	// use (or one of the same broker).
	Publisher message.Publisher

	// Delay is how long after its commit a record is left to its own delivery, which
	// publishes it and writes its mark within milliseconds when all goes well; the relay
	// publishes the records older than that. A shorter delay publishes a failed record
	// sooner and may publish a healthy one twice (under the same UUIDs, which downstream
	// inboxes skip). Default: [DefaultRelayDelay] (30 s).
	Delay time.Duration

	// Interval is the time from the end of one pass to the start of the next, after a pass
	// that published everything it found. A pass that found a full batch is followed at
	// once by the next. Default: [DefaultRelayInterval] (10 s).
	Interval time.Duration

	// BatchSize is the most records one pass's transaction takes, locks and publishes.
	// Default: [DefaultRelayBatchSize] (100).
	BatchSize int

	// MeterProvider receives the counter inboxotel.MetricRelayPublished and the gauges
	// inboxotel.MetricRelayBacklog and inboxotel.MetricRelayOldestAge. Default: the global
	// provider (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
}

func (c *RelayConfig) setDefaults() {
	if c.Delay == 0 {
		c.Delay = DefaultRelayDelay
	}
	if c.Interval == 0 {
		c.Interval = DefaultRelayInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultRelayBatchSize
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
}

func (c RelayConfig) validate() error {
	switch {
	case c.Publisher == nil:
		return errors.New("sqlinbox: RelayConfig.Publisher is nil")
	case c.Delay < 0:
		return fmt.Errorf("sqlinbox: negative RelayConfig.Delay %s", c.Delay)
	case c.Interval < 0:
		return fmt.Errorf("sqlinbox: negative RelayConfig.Interval %s", c.Interval)
	case c.BatchSize < 0:
		return fmt.Errorf("sqlinbox: negative RelayConfig.BatchSize %d", c.BatchSize)
	}
	return nil
}

// Backlog is what a table holds for the relay: its unpublished records.
type Backlog struct {
	// Records is the number of unpublished records.
	Records int64
	// OldestAge is the time since the oldest of them was committed; 0 when there is none.
	OldestAge time.Duration
}

// Backlog returns the table's unpublished records: their number and the age of the oldest.
// On a table without the column unpublished it returns an error wrapping
// [ErrRelayUnavailable].
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	if err := s.relayReady(ctx); err != nil {
		return Backlog{}, err
	}
	var b Backlog
	err := s.pool.inTx(ctx, false, func(q querier) error {
		rows, err := q.query(ctx, s.sql.relay.Backlog)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return errors.Join(rows.Err(), errors.New("no row"))
		}
		var micros int64
		if err := rows.Scan(&b.Records, &micros); err != nil {
			return err
		}
		b.OldestAge = time.Duration(micros) * time.Microsecond
		return rows.Err()
	})
	if err != nil {
		return Backlog{}, fmt.Errorf("sqlinbox: read the unpublished backlog: %w", err)
	}
	return b, nil
}

// relayReady returns nil once the table has passed its check with the column unpublished.
func (s *Store) relayReady(ctx context.Context) error {
	if err := s.shapeKnown(ctx); err != nil {
		return err
	}
	if s.marks() {
		return nil
	}
	if s.sql.relay == nil {
		return fmt.Errorf("%w: dialect %q has no Relay", ErrRelayUnavailable, s.sql.dialect.Name())
	}
	how := "add it with the migration of " + upgradeCommand(s.sql.dialect, s.sql.table)
	if name, _, _ := s.sql.dialect.UpgradeTable(s.sql.table); name == "" {
		how = "add it with " + strings.Join(s.sql.relay.AddColumn, "; ")
	}
	return fmt.Errorf("%w: table %s has no column unpublished; %s, then restart the services that use the table",
		ErrRelayUnavailable, s.sql.table.Quoted, how)
}

// relayed is one record a pass took.
type relayed struct {
	consumer, key string
	produced      []byte
}

// relayPass takes up to config.BatchSize unpublished records older than config.Delay in one
// transaction, publishes them in order and marks those it published. A record whose publish
// fails ends the pass: the ones before it are marked and committed, it and the rest stay for
// the next pass. It returns the number of records published.
func (s *Store) relayPass(ctx context.Context, config RelayConfig) (taken, published int, err error) {
	if err := s.relayReady(ctx); err != nil {
		return 0, 0, err
	}
	relay := s.sql.relay
	var publishErr error
	err = s.pool.inTx(ctx, true, func(q querier) error {
		if relay.Lock != "" {
			if _, err := q.exec(ctx, relay.Lock); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		records, err := takeRecords(ctx, q, relay.Take, s.sql.dialect.Age(config.Delay), config.BatchSize)
		if err != nil {
			return err
		}
		taken = len(records)
		var consumers, keys []string
		for _, r := range records {
			if publishErr = publishRecord(config.Publisher, r); publishErr != nil {
				break
			}
			consumers, keys = append(consumers, r.consumer), append(keys, r.key)
		}
		if len(keys) == 0 {
			return nil
		}
		query, args := relay.Mark(consumers, keys)
		if _, err := q.exec(ctx, query, args...); err != nil {
			return fmt.Errorf("mark the published records: %w", err)
		}
		published = len(keys)
		return nil
	})
	if err != nil {
		return taken, 0, fmt.Errorf("sqlinbox: relay: %w", err)
	}
	if publishErr != nil {
		return taken, published, fmt.Errorf("sqlinbox: relay: publish: %w", publishErr)
	}
	return taken, published, nil
}

// takeRecords runs take and reads the records it returns.
func takeRecords(ctx context.Context, q querier, take string, age any, limit int) ([]relayed, error) {
	rows, err := q.query(ctx, take, age, limit)
	if err != nil {
		return nil, fmt.Errorf("take the unpublished records: %w", err)
	}
	defer rows.Close()
	var records []relayed
	for rows.Next() {
		var consumer, key []byte
		var r relayed
		if err := rows.Scan(&consumer, &key, &r.produced); err != nil {
			return nil, fmt.Errorf("read an unpublished record: %w", err)
		}
		r.consumer, r.key = string(consumer), string(key)
		records = append(records, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the unpublished records: %w", err)
	}
	return records, nil
}

// publishRecord publishes the messages of one record, each to its recorded topic. A message
// returned by a handler without a publish topic was never published by its router either,
// and is not now.
func publishRecord(publisher message.Publisher, r relayed) error {
	rec, err := record.Decode(r.produced)
	if err != nil {
		return fmt.Errorf("record of key %q for consumer %q: %w", r.key, r.consumer, err)
	}
	for _, list := range [][]record.Message{rec.Returned, rec.Published} {
		for _, m := range list {
			if m.Topic == "" {
				continue
			}
			if err := publisher.Publish(m.Topic, m.Msg); err != nil {
				return fmt.Errorf("message %q of key %q for consumer %q to topic %q: %w", m.Msg.UUID, r.key, r.consumer, m.Topic, err)
			}
		}
	}
	return nil
}

// relayMetrics are a runner's instruments.
type relayMetrics struct {
	published metric.Int64Counter
	backlog   metric.Int64Gauge
	oldest    metric.Float64Gauge
	table     metric.MeasurementOption
}

func newRelayMetrics(provider metric.MeterProvider, table Table) (relayMetrics, error) {
	meter := provider.Meter(inboxotel.ScopeName)
	m := relayMetrics{table: metric.WithAttributes(attribute.String("table", table.label()))}
	var err error
	if m.published, err = meter.Int64Counter(inboxotel.MetricRelayPublished,
		metric.WithDescription("Inbox records published by the relay"), metric.WithUnit("{record}")); err != nil {
		return m, fmt.Errorf("sqlinbox: relay: metrics: %w", err)
	}
	if m.backlog, err = meter.Int64Gauge(inboxotel.MetricRelayBacklog,
		metric.WithDescription("Unpublished inbox records after the relay's last pass"), metric.WithUnit("{record}")); err != nil {
		return m, fmt.Errorf("sqlinbox: relay: metrics: %w", err)
	}
	if m.oldest, err = meter.Float64Gauge(inboxotel.MetricRelayOldestAge,
		metric.WithDescription("Age of the oldest unpublished inbox record after the relay's last pass"), metric.WithUnit("s")); err != nil {
		return m, fmt.Errorf("sqlinbox: relay: metrics: %w", err)
	}
	return m, nil
}

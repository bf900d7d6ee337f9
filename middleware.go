package inbox

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/internal/cause"
)

// Config configures [NewMiddleware]. Consumer (or ConsumerByHandler) is required; every other
// field has a default.
type Config struct {
	// Consumer names the inbox partition: a message is processed once per consumer. Name
	// the service or business process whose effects the handler writes ("billing"), and use
	// the same name in every handler and every process that compete for the messages of one
	// queue or consumer group (several router handlers on one RabbitMQ queue, members of a
	// NATS queue group, a Kafka or Redis Streams consumer group), so that a copy reaching
	// any of them is recognised. Handlers that must each process every message (fan-out,
	// each on its own queue or group) need a consumer each: use ConsumerByHandler, or a
	// middleware of its own per handler ([message.Handler.AddMiddleware]).
	//
	// Required, unless ConsumerByHandler is set: [NewMiddleware] returns an error wrapping
	// [ErrNoConsumer] without either. There is no default because none can be inferred: the
	// router handler's name gives competing handlers a consumer each, so a copy that reaches
	// another of them runs again, and a renamed handler runs again what it processed before
	// the rename; the subscribed topic gives fan-out handlers one consumer, so all but the
	// first would ack every message unprocessed. A name is at most [MaxConsumerLength] bytes of
	// UTF-8 without control characters, here and in ConsumerByHandler.
	Consumer string

	// ConsumerByHandler maps the name of the router handler a message arrives through
	// ([message.HandlerNameFromCtx]) to its consumer, for one middleware on a router whose
	// handlers are of different consumers. Handlers that compete for one queue map to one
	// consumer; handlers that each must see every message, each on its own queue, map to
	// their own:
	//
	//	inbox.Config{ConsumerByHandler: map[string]string{
	//		"billing-0": "billing", "billing-1": "billing", // competing: one queue, one consumer
	//		"audit":     "audit",                          // fan-out: its own queue and consumer
	//	}}
	//
	// Write the map out rather than building it from the handlers' names: a handler renamed
	// later keeps its consumer by a new entry, and a message from a handler the map does not
	// name fails with an error wrapping [ErrNoConsumer], before any claim or effect, instead of
	// being processed again under a new name. It cannot be combined with Consumer.
	// [NewMiddleware] copies it: changing it afterwards changes nothing.
	ConsumerByHandler map[string]string

	// Key returns the message's idempotency key, at most [MaxKeyLength] bytes of UTF-8 without
	// control characters.
	// Default: [UUIDKey] (msg.UUID). [KeyFromMetadata] reads a business key instead. An empty
	// key fails the message with an error wrapping [ErrInvalidKey]; it is never skipped
	// silently.
	Key func(*message.Message) (string, error)

	// Fingerprint returns a fingerprint of the message, stored with the claim and compared
	// when a duplicate arrives. Default: [PayloadSHA256]. Return nil to store and compare none:
	// a copy whose fingerprint is nil is not compared, but a copy with one does not match a
	// claim stored without one (a mismatch, see OnFingerprintMismatch), so that a first
	// message without a fingerprint cannot turn the check off for its key. A Fingerprint
	// turned on for a consumer that had none makes the duplicates of its earlier claims
	// mismatches until retention deletes them: use [AckMismatch] for that while.
	Fingerprint func(*message.Message) []byte

	// OnFingerprintMismatch is what happens to a duplicate whose fingerprint differs from the
	// stored one. Default: [RejectMismatch] (nack with a *FingerprintMismatchError).
	OnFingerprintMismatch MismatchPolicy

	// Skip, if set, is asked first for every message; a message for which it returns true
	// is acked without a claim and without running the handler. Use it for messages the
	// handler would ack without processing, such as components/cqrs events of types that
	// this handler does not handle on a topic shared by several types, so that the inbox
	// does not grow by a row per message per handler. Default: nil, every message is
	// claimed.
	Skip func(*message.Message) bool

	// WriteBehind runs the handler before the claim instead of inside the claim's
	// transaction. The handler gets no transaction ([TxFromContext] returns ok == false, on
	// every store, so one handler runs unchanged on all of them); it writes with [ExecAtCommit] and
	// publishes by returning messages or through a [Publisher]. When it returns, the claim,
	// the queued writes, the record of its messages and COMMIT are sent together: one
	// round trip on a store made by sqlinbox.NewPgx or sqlinbox.NewMultiStatement (MySQL). If the
	// key turns out to be committed already, the handler's writes and messages are
	// discarded and the message is a duplicate.
	//
	// Use it for handlers whose only effects are database writes they do not need to read
	// back and messages. Keep the default (false) for a handler that reads its own writes,
	// or that calls an external system and must know the message is not a duplicate first:
	// in write-behind mode the handler also runs for duplicates; only its effects are
	// dropped. Other stores claim, write and commit in the same order, with a round trip
	// each.
	WriteBehind bool

	// Publisher is the Publisher through which this inbox publishes the messages recorded
	// by handlers that publish (see Publisher), set here so that a duplicate that arrives
	// before any handler of this process has published can publish them again. Default:
	// the first Publisher a handler publishes through; until there is one, such a
	// duplicate fails with [ErrNoPublisher].
	Publisher *Publisher

	// MaxRecorded is the largest record, in bytes, of the messages a handler returns or
	// publishes through a [Publisher]: their UUIDs, metadata and payloads, encoded (base64 in
	// JSON, about 4/3 of the raw bytes), which the middleware stores with the claim so that a
	// duplicate can publish them again. A handler that produces more fails with an error
	// wrapping [ErrRecordTooLarge] before anything of it is sent to the database. Default:
	// [DefaultMaxRecorded] (4 MiB), which a MySQL request carries, hex-encoded, within the
	// server's default max_allowed_packet (16 MiB on MariaDB). Negative is refused.
	MaxRecorded int64

	// MeterProvider receives the middleware's OpenTelemetry metrics, named in package
	// inboxotel. Default: the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// TracerProvider receives the middleware's OpenTelemetry spans, named in package
	// inboxotel, children of the span in the message's context. Default: the global
	// provider, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// DefaultMaxRecorded is the default of [Config.MaxRecorded].
const DefaultMaxRecorded = 4 << 20 // 4 MiB

// endTimeout bounds COMMIT and ROLLBACK, which run detached from the message context: a
// subscriber that cancels the context while it closes must not fail the commit of a handler
// that succeeded, and a hung database must not hold the handler for ever.
const endTimeout = 30 * time.Second

func (c *Config) setDefaults() {
	if c.Key == nil {
		c.Key = UUIDKey
	}
	if c.Fingerprint == nil {
		c.Fingerprint = PayloadSHA256
	}
	if c.MaxRecorded == 0 {
		c.MaxRecorded = DefaultMaxRecorded
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
}

func (c Config) validate() error {
	if c.OnFingerprintMismatch != RejectMismatch && c.OnFingerprintMismatch != AckMismatch {
		return fmt.Errorf("inbox: unknown OnFingerprintMismatch policy %d", c.OnFingerprintMismatch)
	}
	if c.MaxRecorded < 0 {
		return fmt.Errorf("inbox: negative MaxRecorded %d", c.MaxRecorded)
	}
	if c.Consumer != "" && c.ConsumerByHandler != nil {
		return errors.New("inbox: set Consumer or ConsumerByHandler, not both")
	}
	if c.Consumer == "" && len(c.ConsumerByHandler) == 0 {
		return fmt.Errorf("%w: set Config.Consumer to the name of the service whose effects the handler writes "+
			"(the same for every handler and process that compete for one queue), or Config.ConsumerByHandler "+
			"for handlers that each must see every message", ErrNoConsumer)
	}
	return c.validateConsumers()
}

// NewMiddleware returns a router middleware that makes a handler an idempotent consumer.
//
// For each message it begins a transaction in store and claims (consumer, key) in it. If
// the claim is new, the handler runs with the transaction in msg.Context() (see
// [TxFromContext]); when the handler succeeds, the messages it returned or published through a
// [Publisher] are recorded with the claim, the transaction commits, the middleware publishes
// what the handler published, and the router publishes what it returned and acks; when the
// handler fails or panics the transaction rolls back, releasing the claim, and the router
// nacks, so a redelivery runs the handler again. If the key was claimed by an earlier
// delivery that committed, the handler is skipped, what that delivery's handler produced is
// published again with its original UUIDs (in case the first publish failed) and the message
// is acked. [Config.WriteBehind] runs the handler first and claims after it. Without
// [Config.Consumer] or [Config.ConsumerByHandler] it returns an error wrapping [ErrNoConsumer].
//
// Add it inside middleware.Retry, so that every retry gets a fresh transaction, inside
// middleware.PoisonQueue and middleware.Recoverer, and outside middleware.Timeout, whose
// cancelled context the inbox keeps from reaching the middleware after it:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(publisher, "orders_poison", inbox.Poisonous)
//	...
//	retry := middleware.Retry{MaxRetries: math.MaxInt32, InitialInterval: 50 * time.Millisecond,
//		Multiplier: 1.5, MaxInterval: 2 * time.Second, ShouldRetry: inbox.ShouldRetry(3, logger), Logger: logger}
//	router.AddMiddleware(poisonQueue, retry.Middleware, middleware.Recoverer,
//		inboxMiddleware, middleware.Timeout(10*time.Second), middleware.CorrelationID)
//
// An error its store reports as a failure of the infrastructure (a store with an
// IsTransient(err error) bool method, as sqlinbox's has) comes back marked so that
// [Poisonous] reports false for it, for PoisonQueueWithFilter and Retry to tell it from the
// message's own failure.
//
// It logs its consumer (or ConsumerByHandler's map) at info level, and each router
// handler's consumer once, with its first message, so that a consumer set by accident
// differently in each process shows in the logs. A nil logger logs nothing.
func NewMiddleware(store Store, config Config, logger watermill.LoggerAdapter) (message.HandlerMiddleware, error) {
	if store == nil {
		return nil, errors.New("inbox: NewMiddleware: store is nil")
	}
	config.setDefaults()
	config.ConsumerByHandler = maps.Clone(config.ConsumerByHandler)
	if err := config.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	metrics, err := newMetrics(config.MeterProvider)
	if err != nil {
		return nil, err
	}
	m := &middleware{store: store, config: config, logger: logger, metrics: metrics,
		tracer: config.TracerProvider.Tracer(inboxotel.ScopeName)}
	if t, ok := store.(interface{ IsTransient(err error) bool }); ok {
		m.transient = t.IsTransient
	}
	if config.Publisher != nil {
		if err := m.usePublisher(config.Publisher); err != nil {
			return nil, err
		}
	}
	m.logConsumers()
	return m.wrap, nil
}

type middleware struct {
	store     Store
	config    Config
	logger    watermill.LoggerAdapter
	metrics   *metrics
	tracer    trace.Tracer
	publisher atomic.Pointer[Publisher] // the one this inbox publishes recorded messages through
	handlers  sync.Map                  // the router handlers whose consumer was logged
	transient func(error) bool          // the store's IsTransient; nil: it has none
	leaving   leavingSet                // committed records being published (published.go)
}

func (m *middleware) wrap(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		return m.handle(h, msg)
	}
}

func (m *middleware) handle(h message.HandlerFunc, msg *message.Message) (produced []*message.Message, err error) {
	if m.config.Skip != nil && m.config.Skip(msg) {
		m.metrics.skipped.Add(msg.Context(), 1, m.metrics.attrs("", message.HandlerNameFromCtx(msg.Context())).add...)
		return nil, nil
	}
	d := m.newDelivery(msg)
	defer func() {
		if recovered := recover(); recovered != nil {
			d.end(fmt.Errorf("panic: %v", recovered))
			panic(recovered) // the router (or middleware.Recoverer) turns it into a nack
		}
		err = m.markInfrastructure(err, d.judged)
		d.end(err)
	}()
	if err := d.identify(); err != nil {
		return nil, err
	}
	if m.config.WriteBehind {
		return d.writeBehind(h)
	}
	return d.claimFirst(h)
}

// usePublisher makes p the [Publisher] of this inbox, unless it has another one.
func (m *middleware) usePublisher(p *Publisher) error {
	if err := p.bind(m.store); err != nil {
		return err
	}
	if m.publisher.CompareAndSwap(nil, p) || m.publisher.Load() == p {
		return nil
	}
	return fmt.Errorf("inbox: %w: this inbox publishes through another Publisher; share one between your buses", cause.ErrPublisherMismatch)
}

package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Config configures NewMiddleware. The zero value is ready to use.
type Config struct {
	// Consumer names the inbox partition: a message is processed once per consumer, so two
	// handlers that consume one topic each process every message once.
	// Default: the name of the router handler the message arrives through
	// (message.HandlerNameFromCtx). With neither, the message fails with ErrNoConsumer.
	Consumer string

	// Key returns the message's idempotency key, at most MaxKeyLength bytes of UTF-8.
	// Default: UUIDKey (msg.UUID). KeyFromMetadata reads a business key instead. An empty
	// key fails the message with ErrEmptyKey; it is never skipped silently.
	Key func(*message.Message) (string, error)

	// Fingerprint returns a fingerprint of the message, stored with the claim and compared
	// when a duplicate arrives. Default: PayloadSHA256. Return nil to store and compare none.
	Fingerprint func(*message.Message) []byte

	// OnFingerprintMismatch is what happens to a duplicate whose fingerprint differs from the
	// stored one. Default: RejectMismatch (nack with a *FingerprintMismatchError).
	OnFingerprintMismatch MismatchPolicy

	// MeterProvider receives the middleware's OpenTelemetry metrics (see MetricProcessed and
	// the other Metric names). Default: the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

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
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
}

func (c Config) validate() error {
	if c.OnFingerprintMismatch != RejectMismatch && c.OnFingerprintMismatch != AckMismatch {
		return fmt.Errorf("inbox: unknown OnFingerprintMismatch policy %d", c.OnFingerprintMismatch)
	}
	if c.Consumer != "" {
		return validateConsumer(c.Consumer)
	}
	return nil
}

// NewMiddleware returns a router middleware that makes a handler an idempotent consumer.
//
// For each message it begins a transaction in store and claims (consumer, key) in it. If
// the claim is new, the handler runs with the transaction in msg.Context() (see
// TxFromContext); when the handler succeeds, the messages it returned are recorded with the
// claim, the transaction commits and the router publishes them and acks; when it fails or
// panics the transaction rolls back, releasing the claim, and the router nacks, so a
// redelivery runs the handler again. If the key was claimed by an earlier delivery that
// committed, the handler is skipped, the messages that delivery's handler returned are
// returned again (the router republishes them with their original UUIDs, in case the first
// publish failed) and the message is acked.
//
// Add it inside middleware.Retry, so that every retry gets a fresh transaction, and inside
// middleware.PoisonQueue: router.AddMiddleware(poisonQueue, retry.Middleware, inboxMiddleware).
//
// A nil logger logs nothing.
func NewMiddleware(store Store, config Config, logger watermill.LoggerAdapter) (message.HandlerMiddleware, error) {
	if store == nil {
		return nil, ErrNilStore
	}
	config.setDefaults()
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
	m := &middleware{store: store, config: config, logger: logger, metrics: metrics}
	return m.wrap, nil
}

type middleware struct {
	store   Store
	config  Config
	logger  watermill.LoggerAdapter
	metrics *metrics
}

func (m *middleware) wrap(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		return m.handle(h, msg)
	}
}

func (m *middleware) handle(h message.HandlerFunc, msg *message.Message) (produced []*message.Message, err error) {
	ctx := msg.Context()
	handler := message.HandlerNameFromCtx(ctx)
	consumer, err := m.consumer(handler)
	var key string
	if err == nil {
		key, err = m.key(msg)
	}
	if err != nil {
		m.metrics.fail(ctx, consumer, handler, "key")
		return nil, err
	}
	attrs := m.metrics.attrs(consumer, handler)
	fields := func() watermill.LogFields { // built only when something is logged
		return watermill.LogFields{"consumer": consumer, "message_uuid": msg.UUID, "idempotency_key": key}
	}

	begun := time.Now()
	fingerprint := m.config.Fingerprint(msg)
	tx, prior, err := m.store.Claim(ctx, Claim{Consumer: consumer, Key: key, Fingerprint: fingerprint})
	m.metrics.claimDuration.Record(ctx, seconds(begun), attrs.record...)
	if err != nil {
		m.metrics.fail(ctx, consumer, handler, "claim")
		return nil, fmt.Errorf("inbox: claim key %q for consumer %q: %w", key, consumer, err)
	}
	if prior != nil {
		return m.duplicate(ctx, attrs, consumer, key, fingerprint, prior, fields)
	}

	msg.SetContext(withClaim(ctx, claimed{tx: tx, key: key}))
	defer msg.SetContext(ctx) // the transaction ends here; nothing after us may reach it

	defer func() {
		if recovered := recover(); recovered != nil {
			m.rollback(ctx, tx, fields)
			m.metrics.rolledBack.Add(ctx, 1, attrs.add...)
			panic(recovered) // the router (or middleware.Recoverer) turns it into a nack
		}
	}()

	produced, err = h(msg)
	if err != nil {
		if rbErr := m.rollback(ctx, tx, fields); rbErr != nil {
			err = errors.Join(err, rbErr)
		}
		m.metrics.rolledBack.Add(ctx, 1, attrs.add...)
		return nil, err
	}

	encoded, err := encodeProduced(produced)
	if err != nil {
		m.metrics.fail(ctx, consumer, handler, "commit")
		return nil, errors.Join(err, m.rollback(ctx, tx, fields))
	}
	// A commit that fails may still have been made durable by the server before the
	// connection broke. Either way we nack: the redelivery finds the claim committed and is
	// acked as a duplicate, or finds it absent and runs the handler again.
	if err := m.commit(ctx, tx, encoded); err != nil {
		m.metrics.fail(ctx, consumer, handler, "commit")
		return nil, fmt.Errorf("inbox: commit claim of key %q for consumer %q: %w", key, consumer, err)
	}
	m.metrics.txDuration.Record(ctx, seconds(begun), attrs.record...)
	m.metrics.processed.Add(ctx, 1, attrs.add...)
	return produced, nil
}

// duplicate acks a message whose key is committed, returning what its first handler run
// produced, unless its payload differs and the policy rejects that.
func (m *middleware) duplicate(ctx context.Context, attrs *measurementOptions, consumer, key string, fingerprint []byte,
	prior *Processed, fields func() watermill.LogFields,
) ([]*message.Message, error) {
	if fingerprint != nil && prior.Fingerprint != nil && !bytes.Equal(fingerprint, prior.Fingerprint) {
		m.metrics.mismatches.Add(ctx, 1, attrs.add...)
		mismatch := &FingerprintMismatchError{Consumer: consumer, Key: key, Stored: prior.Fingerprint, Received: fingerprint}
		if m.config.OnFingerprintMismatch == RejectMismatch {
			return nil, mismatch
		}
		m.logger.Error("Inbox: duplicate key with a different payload acked", mismatch, fields())
	}
	produced, err := decodeProduced(prior.Produced)
	if err != nil {
		return nil, err
	}
	m.metrics.duplicates.Add(ctx, 1, attrs.add...)
	if _, silent := m.logger.(watermill.NopLogger); silent {
		return produced, nil // skip building the log fields of every duplicate
	}
	if len(produced) > 0 {
		m.logger.Debug("Inbox: duplicate message skipped, its produced messages returned again",
			fields().Add(watermill.LogFields{"republished": len(produced)}))
	} else {
		m.logger.Debug("Inbox: duplicate message skipped", fields())
	}
	return produced, nil
}

func (m *middleware) commit(ctx context.Context, tx Tx, produced []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	return tx.Commit(ctx, produced)
}

// rollback runs even when the message context is done, because the transaction must end.
func (m *middleware) rollback(ctx context.Context, tx Tx, fields func() watermill.LogFields) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil {
		err = fmt.Errorf("inbox: rollback: %w", err)
		m.logger.Error("Inbox: rollback failed", err, fields())
		return err
	}
	return nil
}

// consumer is Config.Consumer, or else the name of the router handler.
func (m *middleware) consumer(handler string) (string, error) {
	if m.config.Consumer != "" {
		return m.config.Consumer, nil
	}
	if handler == "" {
		return "", ErrNoConsumer
	}
	if err := validateConsumer(handler); err != nil {
		return "", err
	}
	return handler, nil
}

func (m *middleware) key(msg *message.Message) (string, error) {
	key, err := m.config.Key(msg)
	if err != nil {
		return "", fmt.Errorf("inbox: key function for message %q: %w", msg.UUID, err)
	}
	if key == "" {
		return "", fmt.Errorf("%w (message uuid %q)", ErrEmptyKey, msg.UUID)
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrKeyTooLong, len(key), MaxKeyLength)
	}
	if reason := invalidText(key); reason != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, reason)
	}
	return key, nil
}

func validateConsumer(name string) error {
	if len(name) > MaxConsumerLength {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidConsumer, len(name), MaxConsumerLength)
	}
	if reason := invalidText(name); reason != "" {
		return fmt.Errorf("%w: %s", ErrInvalidConsumer, reason)
	}
	return nil
}

// invalidText says why s cannot be stored as a key column value on every dialect, or "".
func invalidText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	return ""
}

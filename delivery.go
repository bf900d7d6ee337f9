package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/watermill-inbox/inboxotel"
	"github.com/inboxkit/watermill-inbox/internal/entry"
	"github.com/inboxkit/watermill-inbox/internal/record"
)

// delivery is one message on its way through the middleware: who consumes it, under which
// key, and the span and timings that describe it.
type delivery struct {
	m        *middleware
	msg      *message.Message
	original context.Context // the message's context as the router gave it
	ctx      context.Context // original, inside the delivery's span
	span     trace.Span
	outcome  string

	handler string
	claim   Claim // what the message is claimed as; set by identify
	// overran is set when the handler failed after a deadline, its context's
	// (middleware.Timeout inside the inbox) or its own (an error wrapping
	// context.DeadlineExceeded): its error is its own, whatever its statements were cut off
	// with.
	overran bool
	// judged is set when the error is the handler's, judged where it was returned
	// (handlerFailed): the store's IsTransient is not asked about it again.
	judged bool
	attrs  *measurementOptions
	begun  time.Time
}

func (m *middleware) newDelivery(msg *message.Message) *delivery {
	original := msg.Context()
	d := &delivery{m: m, msg: msg, original: original, handler: message.HandlerNameFromCtx(original)}
	d.ctx, d.span = m.tracer.Start(original, inboxotel.SpanMessage, trace.WithSpanKind(trace.SpanKindConsumer))
	return d
}

// identify decides the message's claim (see [Config].claimOf), or the error that nacks it.
func (d *delivery) identify() (err error) {
	if d.claim, err = d.m.config.claimOf(d.msg, d.handler); err != nil {
		d.fail("key")
		return err
	}
	d.attrs = d.m.metrics.attrs(d.claim.Consumer, d.handler)
	if entry.From(d.original) == nil { // an entry point's deliveries come through no router handler
		d.m.logHandlerOnce(d.handler, d.claim.Consumer)
	}
	return nil
}

// claimFirst claims the key, runs the handler in the claim's transaction and commits.
func (d *delivery) claimFirst(h message.HandlerFunc) ([]*message.Message, error) {
	d.begun = time.Now()
	ctx, span := d.m.tracer.Start(d.ctx, inboxotel.SpanClaim)
	tx, prior, err := d.m.store.Claim(ctx, d.claim)
	endSpan(span, err)
	d.m.metrics.claimDuration.Record(d.ctx, seconds(d.begun), d.attrs.record...)
	if err != nil {
		d.fail("claim")
		return nil, fmt.Errorf("inbox: claim key %q for consumer %q: %w", d.claim.Key, d.claim.Consumer, err)
	}
	if prior != nil {
		return d.duplicate(prior)
	}

	sc := &scope{inbox: d.m, key: d.claim.Key, tx: tx}
	returned, _, pubs, err := d.run(h, sc, func() { _ = d.rollback(tx) })
	if err != nil {
		return nil, d.handlerFailed(tx, err)
	}
	encoded, err := d.encode(returned, pubs)
	if err != nil {
		return nil, errors.Join(err, d.rollback(tx))
	}
	// A commit that fails may still have been made durable by the server before the
	// connection broke. Either way we nack: the redelivery finds the claim committed and is
	// acked as a duplicate, or finds it absent and runs the handler again.
	l := d.startLeaving(returned, len(pubs))
	if err := d.commit(func(ctx context.Context) error { return tx.Commit(ctx, encoded) }); err != nil {
		d.stopLeaving(l)
		return nil, err
	}
	d.committed()
	return d.processed(l, returned, pubs)
}

// writeBehind runs the handler first, then claims, writes and commits in one step; a key
// that is committed already discards what the handler did.
func (d *delivery) writeBehind(h message.HandlerFunc) ([]*message.Message, error) {
	sc := &scope{inbox: d.m, key: d.claim.Key}
	returned, queued, pubs, err := d.run(h, sc, func() {})
	if err != nil {
		d.judged = true // the handler ran without a transaction of the store's: its error is its own
		return nil, err
	}
	encoded, err := d.encode(returned, pubs)
	if err != nil {
		return nil, err
	}
	d.begun = time.Now()
	var prior *Record
	l := d.startLeaving(returned, len(pubs))
	err = d.commit(func(ctx context.Context) (err error) {
		prior, err = claimAndCommit(ctx, d.m.store, d.claim, queued, encoded)
		return err
	})
	if err != nil || prior != nil {
		d.stopLeaving(l)
	}
	if err != nil {
		return nil, err
	}
	if prior != nil {
		return d.duplicate(prior)
	}
	d.committed()
	return d.processed(l, returned, pubs)
}

// encode makes the record of what the handler produced, or the error that nacks it.
func (d *delivery) encode(returned []*message.Message, pubs []record.Message) ([]byte, error) {
	encoded, err := encodeProduced(d.recordOf(returned, pubs), d.m.config.MaxRecorded)
	if err != nil {
		d.fail("record")
		return nil, fmt.Errorf("%w (key %q, consumer %q)", err, d.claim.Key, d.claim.Consumer)
	}
	return encoded, nil
}

// run runs the handler with sc in the message context and collects what it produced. A
// panic calls onPanic (which rolls back) and goes on.
func (d *delivery) run(h message.HandlerFunc, sc *scope, onPanic func()) (
	returned []*message.Message, queued []Statement, pubs []record.Message, err error,
) {
	ctx, span := d.m.tracer.Start(d.ctx, inboxotel.SpanHandler)
	d.msg.SetContext(withScope(ctx, sc))
	defer d.msg.SetContext(d.original) // the scope ends here; nothing after us may reach it
	defer func() {
		if recovered := recover(); recovered != nil {
			sc.end()
			onPanic()
			d.rolledBack()
			endSpan(span, fmt.Errorf("panic: %v", recovered))
			panic(recovered)
		}
	}()
	returned, err = h(d.msg)
	if err != nil {
		ctxErr := d.msg.Context().Err()
		d.overran = errors.Is(ctxErr, context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
		if ctxErr == nil && errors.Is(err, context.Canceled) {
			err = &cancelledByHandler{err} // a context of the handler's own: see Poisonous
		}
	}
	queued, pubs = sc.end()
	endSpan(span, err)
	if err != nil {
		d.rolledBack()
		return nil, nil, nil, err
	}
	return returned, queued, pubs, nil
}

// duplicate acks a message whose key is committed and publishes again what its first
// handler run produced, unless its payload differs and the policy rejects that.
func (d *delivery) duplicate(prior *Record) ([]*message.Message, error) {
	d.outcome = "duplicate"
	// A claim stored without a fingerprint does not match a copy that has one: otherwise a
	// first message whose Fingerprint was nil (a fingerprint over a field it lacked, say)
	// would turn the check off for its key. A copy without one compares nothing.
	if d.claim.Fingerprint != nil && !bytes.Equal(d.claim.Fingerprint, prior.Fingerprint) {
		d.m.metrics.mismatches.Add(d.ctx, 1, d.attrs.add...)
		mismatch := &FingerprintMismatchError{Consumer: d.claim.Consumer, Key: d.claim.Key, Stored: prior.Fingerprint, Received: d.claim.Fingerprint}
		if d.m.config.OnFingerprintMismatch == RejectMismatch {
			return nil, mismatch
		}
		d.m.logger.Error("Inbox: duplicate key with a different payload acked", mismatch, d.fields())
	}
	rec, err := decodeProduced(prior.Produced)
	if err != nil {
		return nil, err
	}
	if ex := entry.From(d.original); ex != nil {
		ex.SetCommitted(true, rec.Response)
	}
	if prior.Published || d.m.leaving.published(d.ctx, d.claim) {
		// Everything it recorded has left (see PublishedMarker), or its first delivery in
		// this process has just published it: publishing it again would only send copies
		// downstream.
		rec.Returned, rec.Published = nil, nil
	}
	returned := make([]*message.Message, 0, len(rec.Returned))
	for _, m := range rec.Returned {
		returned = append(returned, m.Msg)
	}
	pubs := rec.Published
	if err := d.leave(nil, returned, len(pubs), func() error { return d.publish(pubs) }); err != nil {
		return nil, err
	}
	d.m.metrics.duplicates.Add(d.ctx, 1, d.attrs.add...)
	if _, silent := d.m.logger.(watermill.NopLogger); silent {
		return returned, nil // skip building the log fields of every duplicate
	}
	if n := len(returned) + len(pubs); n > 0 {
		d.m.logger.Debug("Inbox: duplicate message skipped, its produced messages published again",
			d.fields().Add(watermill.LogFields{"republished": n}))
	} else {
		d.m.logger.Debug("Inbox: duplicate message skipped", d.fields())
	}
	return returned, nil
}

// processed publishes what the handler published, now that it is committed, and returns
// what it returned for the router to publish.
func (d *delivery) processed(l *leaving, returned []*message.Message, pubs []record.Message) ([]*message.Message, error) {
	d.m.metrics.txDuration.Record(d.ctx, seconds(d.begun), d.attrs.record...)
	d.m.metrics.processed.Add(d.ctx, 1, d.attrs.add...)
	d.outcome = "processed"
	if err := d.leave(l, returned, len(pubs), func() error { return d.publish(pubs) }); err != nil {
		return nil, err
	}
	return returned, nil
}

// publish sends messages a handler published through a [Publisher], after their commit.
func (d *delivery) publish(pubs []record.Message) error {
	if len(pubs) == 0 {
		return nil
	}
	p := d.m.publisher.Load()
	if p == nil {
		d.fail("publish")
		return fmt.Errorf("%w: %d recorded message(s) of key %q for consumer %q", ErrNoPublisher, len(pubs), d.claim.Key, d.claim.Consumer)
	}
	ctx, span := d.m.tracer.Start(d.ctx, inboxotel.SpanPublish)
	for _, pub := range pubs {
		pub.Msg.SetContext(ctx)
	}
	err := p.publish(pubs)
	endSpan(span, err)
	if err != nil {
		d.fail("publish")
		return fmt.Errorf("%w (key %q, consumer %q; the redelivery publishes them again)", err, d.claim.Key, d.claim.Consumer)
	}
	return nil
}

// commit ends the transaction through end, detached from the message context.
func (d *delivery) commit(end func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), endTimeout)
	defer cancel()
	ctx, span := d.m.tracer.Start(ctx, inboxotel.SpanCommit)
	err := end(ctx)
	endSpan(span, err)
	if err != nil {
		d.fail("commit")
		if ex := entry.From(d.original); ex != nil {
			ex.CommitFailed = true
		}
		return fmt.Errorf("inbox: commit claim of key %q for consumer %q: %w", d.claim.Key, d.claim.Consumer, err)
	}
	return nil
}

// rollback runs even when the message context is done, because the transaction must end.
func (d *delivery) rollback(tx Tx) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), endTimeout)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil {
		err = fmt.Errorf("inbox: rollback: %w", err)
		d.m.logger.Error("Inbox: rollback failed", err, d.fields())
		return err
	}
	return nil
}

// committed tells an entry point other than a router that the claim is committed: whatever
// happens after it, the delivery's effects are durable, and its recorded response is the answer.
func (d *delivery) committed() {
	if ex := entry.From(d.original); ex != nil {
		ex.SetCommitted(false, nil)
	}
}

func (d *delivery) rolledBack() {
	d.outcome = "rolled_back"
	d.m.metrics.rolledBack.Add(d.ctx, 1, d.attrs.add...)
}

func (d *delivery) fail(stage string) {
	d.outcome = "failed"
	d.m.metrics.fail(d.ctx, d.claim.Consumer, d.handler, stage)
}

// fields are the log fields of the delivery, built only when something is logged. The
// consumer and the key hold no control characters (invalidText); the UUID, which is not the
// key under [KeyFromMetadata], is quoted when it holds one, so that it cannot forge a log line.
func (d *delivery) fields() watermill.LogFields {
	return watermill.LogFields{"consumer": d.claim.Consumer, "handler_name": d.handler, "message_uuid": logSafe(d.msg.UUID),
		"idempotency_key": d.claim.Key}
}

// logSafe returns s, or s quoted as a Go string when it is not valid UTF-8 or holds a control
// character.
func logSafe(s string) string {
	if invalidText(s) == "" {
		return s
	}
	return strconv.Quote(s)
}

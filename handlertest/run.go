package handlertest

import (
	"context"
	"testing"
)

// Run runs every scenario on c, in order: [Reference], [Copies], [Concurrent], [Failures] and
// [External] (which needs [Options.Probe]). They share the reference delivery, which the others
// compare with; a reference that cannot be used (bad input, a handler that never uses the
// inbox transaction, a Snapshot that fails) stops the run, and so does a delivery that
// hangs or the end of ctx. opts may be nil.
//
// Each problem is reported with t.Errorf and returned in the [Result]. Of t, [Run] calls only
// Helper, Errorf and Logf, never Fatal or FailNow: it always returns, and a [testing.TB] that
// embeds the test's and overrides Errorf keeps the reports instead of failing the test.
func Run(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	s, ok := start(ctx, t, c, opts)
	if !ok {
		return s.result
	}
	if b, ok := s.reference(true); ok {
		for _, scenario := range []func(*session, *baseline){(*session).copies, (*session).concurrent, (*session).failures, (*session).external} {
			if !s.goingOn() {
				break
			}
			scenario(s, b)
		}
	}
	return s.end()
}

// Reference delivers the message once and checks that the delivery is acked, that the
// handler runs its statements through the inbox transaction (or queues them) and leaves
// the ending of that transaction to the middleware, that it does not use the transaction,
// or write with the message's context, after it returned, and, with [Options.Recorder], that
// what it publishes reaches the [Recorder]. Every other scenario compares with what this
// delivery left: the state Snapshot reads, the messages produced, the statements run.
func Reference(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	s, ok := start(ctx, t, c, opts)
	if !ok {
		return s.result
	}
	s.reference(true)
	return s.end()
}

// Copies delivers 3 more copies of the message after the reference delivery, one after
// another, each through a fresh middleware (as another instance, or a restarted process,
// receives it after a lost ack): each is acked with no second effect, in the claim-first
// mode without running the handler, and each sends again what the first sent, with the
// same UUIDs.
func Copies(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	return alone(ctx, t, c, opts, (*session).copies)
}

// Concurrent releases 4 copies of the message at once, each through its own middleware and
// so its own connection of the store: exactly one effect, and every copy acked within
// [Options.Deadline], after the redeliveries of what the store reports transient (a
// deadlock, a lock timeout, a busy database). A copy still in flight at the deadline is
// reported with where it is.
func Concurrent(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	return alone(ctx, t, c, opts, (*session).concurrent)
}

// Failures fails the delivery at each point where it can fail: each of the handler's
// statements through the inbox transaction in turn (as many as the reference delivery ran;
// in write-behind mode, each statement it queued), then COMMIT, then a panic right after
// the handler returned. Each time the delivery must be nacked, the state must be the state
// of before it, nothing may have been published, and a redelivery must leave the
// reference's state.
func Failures(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	return alone(ctx, t, c, opts, (*session).failures)
}

// External checks, with [Options.Probe], that every attempt of the handler calls the systems
// outside the database with inbox.KeyFromContext's key: an attempt whose COMMIT fails, its
// redelivery and, in write-behind mode (where the handler runs for a copy too), a copy.
// Without Options.Probe it logs that it is skipped.
func External(ctx context.Context, t testing.TB, c Case, opts *Options) Result {
	t.Helper()
	return alone(ctx, t, c, opts, (*session).external)
}

// alone runs one scenario on a reference delivery of its own, whose problems it leaves to
// [Reference] (it still stops on a reference that cannot be used).
func alone(ctx context.Context, t testing.TB, c Case, opts *Options, scenario func(*session, *baseline)) Result {
	t.Helper()
	s, ok := start(ctx, t, c, opts)
	if !ok {
		return s.result
	}
	if b, ok := s.reference(false); ok {
		scenario(s, b)
	}
	return s.end()
}

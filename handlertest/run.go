package handlertest

// Run runs every scenario on c, in order: Reference, Copies, Concurrent, Failures and
// External (which needs Case.Probe). They share the reference delivery, which the others
// compare with; a reference that cannot be used (bad input, a handler that never uses the
// inbox transaction, a Snapshot that fails) stops the run, and so does a delivery that
// hangs. Each problem is reported with t.Errorf; Run returns when it is done.
func Run(t TB, c Case) {
	t.Helper()
	s, ok := start(t, c)
	if !ok {
		return
	}
	defer s.finish()
	b, ok := s.reference(true)
	if !ok {
		return
	}
	for _, scenario := range []func(*session, *baseline){(*session).copies, (*session).concurrent, (*session).failures, (*session).external} {
		if s.stopped {
			return
		}
		scenario(s, b)
	}
}

// Reference delivers the message once and checks that the delivery is acked, that the
// handler runs its statements through the inbox transaction (or queues them) and leaves
// the ending of that transaction to the middleware, and that it does not use the
// transaction after it returned. Every other scenario compares with what this delivery
// left: the state Snapshot reads, the messages produced, the statements run.
func Reference(t TB, c Case) {
	t.Helper()
	s, ok := start(t, c)
	if !ok {
		return
	}
	defer s.finish()
	s.reference(true)
}

// Copies delivers Case.Copies more copies of the message after the reference delivery,
// one after another, each through a fresh middleware (as another instance, or a restarted
// process, receives it after a lost ack): each is acked with no second effect, in
// claim-first mode without running the handler, and each sends again what the first sent,
// with the same UUIDs.
func Copies(t TB, c Case) {
	t.Helper()
	alone(t, c, (*session).copies)
}

// Concurrent releases Case.Concurrent copies of the message at once, each through its own
// middleware and so its own connection of the store: exactly one effect, and every copy
// acked within Case.Deadline, after the redeliveries that a deadlock, a lock timeout or a
// busy database makes retriable (Case.Retriable). A copy still in flight at the deadline is
// reported with where it is.
func Concurrent(t TB, c Case) {
	t.Helper()
	alone(t, c, (*session).concurrent)
}

// Failures fails the delivery at each point where it can fail: each of the handler's
// statements through the inbox transaction in turn (as many as the reference delivery ran;
// in write-behind mode, each statement it queued), then COMMIT, then a panic right after
// the handler returned. Each time the delivery must be nacked, the state must be the state
// of before it, nothing may have been published, and a redelivery must leave the
// reference's state.
func Failures(t TB, c Case) {
	t.Helper()
	alone(t, c, (*session).failures)
}

// External checks, with Case.Probe, that every attempt of the handler calls the systems
// outside the database with inbox.KeyFromContext's key: an attempt whose COMMIT fails, its
// redelivery and, in write-behind mode (where the handler runs for a copy too), a copy.
// Without Case.Probe it logs that it is skipped.
func External(t TB, c Case) {
	t.Helper()
	alone(t, c, (*session).external)
}

// alone runs one scenario on a reference delivery of its own, whose problems it leaves to
// Reference (it still stops on a reference that cannot be used).
func alone(t TB, c Case, scenario func(*session, *baseline)) {
	t.Helper()
	s, ok := start(t, c)
	if !ok {
		return
	}
	defer s.finish()
	b, ok := s.reference(false)
	if !ok {
		return
	}
	scenario(s, b)
}

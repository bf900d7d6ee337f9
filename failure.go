package inbox

import (
	"context"
	"errors"
)

// Poisonous reports whether err, returned by a handler chain that holds the inbox middleware,
// is the message's own failure, which no later delivery gets past (a malformed payload, a
// fingerprint mismatch, a message without a key, a handler's permanent error), rather than a
// failure of the infrastructure, which a later delivery of the same message gets past. It is
// the filter of Watermill's poison queue:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(publisher, "orders_poison", inbox.Poisonous)
//
// It returns false for nil; for an error the inbox middleware marked as the infrastructure's,
// because its store reports it so (sqlinbox's Store.IsTransient: the table check's refusal,
// a connection refused, closed or reset, a deadlock, a lock timeout, a read-only standby, a
// Galera node not ready, a COMMIT whose outcome is unknown, and more); and for a delivery
// cancelled (context.Canceled: the router or the subscriber closing, which
// middleware.Retry returns while it waits). A handler's own error is poisonous unless it
// wraps one the store reports, such as a deadlock of a statement on the inbox transaction.
// The mark keeps errors.Is and errors.As working on the error it marks.
//
// A store without an IsTransient(error) bool method marks nothing: every error but a
// cancellation is poisonous then.
func Poisonous(err error) bool {
	if err == nil {
		return false
	}
	var infra *infrastructureError
	return !errors.As(err, &infra) && !errors.Is(err, context.Canceled)
}

// infrastructureError marks an error that the store reported as a failure of the
// infrastructure (see Poisonous).
type infrastructureError struct{ err error }

func (e *infrastructureError) Error() string { return e.err.Error() }
func (e *infrastructureError) Unwrap() error { return e.err }

// markInfrastructure marks err if the store reports it as a failure of the infrastructure.
func (m *middleware) markInfrastructure(err error) error {
	if err == nil || m.transient == nil || !m.transient(err) {
		return err
	}
	var infra *infrastructureError
	if errors.As(err, &infra) {
		return err // marked already, by an inbox further in
	}
	return &infrastructureError{err}
}

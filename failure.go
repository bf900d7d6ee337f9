package inbox

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	routermw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
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
// cancelled ([context.Canceled]: the router or the subscriber closing, which
// middleware.Retry returns while it waits). A handler's own error is poisonous unless it
// wraps one the store reports, such as a deadlock of a statement on the inbox transaction,
// and a handler that failed after its context's deadline (middleware.Timeout inside the
// inbox) is poisonous whatever its statements were cut off with: Timeout bounds the handler,
// and one that always overruns is the message's problem or the handler's. A network error of
// the handler's own (a call to another service refused or timed out, a net.Error) reads to
// the store as a connection's failure, and is retried as long as it lasts too: another
// service that is away is not the message's fault either. The mark keeps [errors.Is] and
// [errors.As] working on the error it marks.
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
// infrastructure (see [Poisonous]).
type infrastructureError struct{ err error }

func (e *infrastructureError) Error() string { return e.err.Error() }
func (e *infrastructureError) Unwrap() error { return e.err }

// markInfrastructure marks err if the store reports it as a failure of the infrastructure,
// unless the handler overran its deadline: a handler that runs too long is retried a few
// times and poisoned, whatever its statements were cut off with.
func (m *middleware) markInfrastructure(err error, overran bool) error {
	if err == nil || overran || m.transient == nil || !m.transient(err) {
		return err
	}
	var infra *infrastructureError
	if errors.As(err, &infra) {
		return err // marked already, by an inbox further in
	}
	return &infrastructureError{err}
}

// ShouldRetry returns a ShouldRetry for Watermill's middleware.Retry that tells the two kinds
// of failure apart: a failure of the infrastructure ([Poisonous] reports false) is retried for
// as long as it lasts, with Retry's backoff between attempts; the message's own failure is
// retried until the delivery has been retried retries times, and then returned, for the
// poison queue to take. It logs that last failure once, at error level, to logger (nil logs
// nothing); Retry's Logger logs each failure it retries.
//
// Set Retry's MaxRetries above any count it should reach ([ShouldRetry] decides when to stop)
// and MaxInterval to cap the wait between attempts, as the recommended stack does:
//
//	retry := middleware.Retry{
//		MaxRetries:      math.MaxInt32, // inbox.ShouldRetry decides when to stop
//		InitialInterval: 50 * time.Millisecond,
//		Multiplier:      1.5,
//		MaxInterval:     2 * time.Second, // a database that is away is tried every 2 s
//		ShouldRetry:     inbox.ShouldRetry(3, logger),
//		Logger:          logger,
//	}
//
// Retry counts every retry of the delivery, the infrastructure's too: a message that failed
// while the database was away and then fails on its own is given up on at that first own
// failure once retries retries have been made. The wait between attempts is outside the
// inbox middleware, with the claim's transaction ended, so no connection is held while it
// waits; Retry stops waiting when the message's context is done (the router closing) and
// returns the context's error, which [Poisonous] reports false for.
func ShouldRetry(retries int, logger watermill.LoggerAdapter) func(routermw.RetryParams) bool {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return func(p routermw.RetryParams) bool {
		if !Poisonous(p.Err) || p.RetryNum < retries {
			return true
		}
		logger.Error("Message failed on its own after its retries: giving up on it", p.Err,
			watermill.LogFields{"retry_no": p.RetryNum, "max_retries": retries})
		return false
	}
}

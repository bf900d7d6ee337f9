package inbox

import (
	"context"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	routermw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// Poisonous reports whether err, returned by a handler chain that holds the inbox middleware,
// is the message's own failure, which the recommended stack retries a few times and then
// poisons, rather than a failure of the infrastructure, which it retries for as long as it
// lasts.
//
// The rule, by where a failure happened rather than by the error's type: only the inbox's own
// database is the infrastructure, that is the store's own statements and connections and what
// the database raised on the inbox transaction's session (a deadlock, a lock timeout, the
// session's connection lost), whichever statement of the handler's met it, and everything
// else a handler returns is the message's, the errors of the other services and databases it
// calls included, unless the team marks an error with [Infrastructure].
//
// It is the filter of Watermill's poison queue:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(publisher, "orders_poison", inbox.Poisonous)
//
// It returns false for nil; for an error the inbox middleware marked as the infrastructure's:
// a failure of the store's own work (sqlinbox's Store.IsTransient: the table check's refusal,
// a connection refused, closed or reset, a read-only standby, a Galera node not ready, a
// COMMIT whose outcome is unknown, and more), or a handler's error that its store's
// transaction reports as met on it (a Tx's IsTransient; see [Tx]); for an error marked with
// [Infrastructure]; and for a delivery cancelled ([context.Canceled]: the router or the
// subscriber closing, which middleware.Retry returns while it waits). It returns true for
// everything else: a malformed payload, a fingerprint mismatch, a message without a key, a
// handler's permanent error, a handler's call to another service that failed (a *url.Error, a
// refused or reset connection, a parse error of an address), a connection to another database
// that failed, a handler that failed after a deadline, its own (a sub-timeout's
// [context.DeadlineExceeded]) or its context's (middleware.Timeout inside the inbox), whatever
// its statements were cut off with, and a handler's own cancellation (a [context.Canceled]
// while the message's context goes on). A message can so hold its queue for no more than its
// bounded retries; only the inbox's own database, without which no message gets through,
// holds it for longer. The mark keeps [errors.Is] and [errors.As] working on the error it
// marks.
//
// A store without an IsTransient(error) bool method marks nothing: every error but a
// cancellation and one marked with [Infrastructure] is poisonous then.
func Poisonous(err error) bool {
	if err == nil {
		return false
	}
	var infra *infrastructureError
	if errors.As(err, &infra) {
		return false
	}
	var own *cancelledByHandler
	return errors.As(err, &own) || !errors.Is(err, context.Canceled)
}

// Infrastructure returns err marked as a failure of the infrastructure, which [Poisonous]
// reports false for and [ShouldRetry] retries for as long as it lasts: for a handler whose
// message cannot get through without a service that every message of the queue needs alike
// (the one database or broker the whole consumer writes to, say), so that a message is never
// poisoned while that service is away. Every message of the queue then waits behind the one
// that failed, for as long as the service is away: mark only what a later delivery of every
// message gets past once the service is back, never an error a message's own content can
// cause (an address read from the payload, a request the service refuses). It returns nil for
// nil; [errors.Is] and [errors.As] find what it marks.
func Infrastructure(err error) error {
	if err == nil {
		return nil
	}
	return &infrastructureError{err}
}

// infrastructureError marks an error that the store reported as a failure of the
// infrastructure, or that a team marked with [Infrastructure] (see [Poisonous]).
type infrastructureError struct{ err error }

func (e *infrastructureError) Error() string { return e.err.Error() }
func (e *infrastructureError) Unwrap() error { return e.err }

// cancelledByHandler marks a [context.Canceled] that the handler returned while the message's
// context went on: a context of the handler's own, cancelled by the handler, which a later
// delivery cancels again (see [Poisonous]).
type cancelledByHandler struct{ err error }

func (e *cancelledByHandler) Error() string { return e.err.Error() }
func (e *cancelledByHandler) Unwrap() error { return e.err }

// markInfrastructure marks err, the failure of the store's own work for a delivery (the claim,
// the commit), if the store reports it as a failure of the infrastructure. A handler's error
// is judged where it is returned (handlerFailed), and comes here judged.
func (m *middleware) markInfrastructure(err error, judged bool) error {
	if err == nil || judged || m.transient == nil || !m.transient(err) {
		return err
	}
	var infra *infrastructureError
	if errors.As(err, &infra) {
		return err // marked already, by an inbox further in
	}
	return &infrastructureError{err}
}

// handlerFailed ends the claim's transaction after the handler failed with err and judges
// err by where it happened: it is the infrastructure's only when the transaction reports that
// the handler met it on the inbox's own database (a Tx with an IsTransient method; a store's
// Tx without one leaves it to the store's IsTransient), or the rollback failed with an error
// the store reports, unless the handler overran a deadline or cancelled a context of its own.
func (d *delivery) handlerFailed(tx Tx, err error) error {
	rbErr := d.rollback(tx)
	d.judged = true
	infra := false
	var own *cancelledByHandler
	if !d.overran && !errors.As(err, &own) {
		if t, ok := tx.(interface{ IsTransient(err error) bool }); ok {
			infra = t.IsTransient(err)
		} else if d.m.transient != nil {
			infra = d.m.transient(err) || rbErr != nil && d.m.transient(rbErr)
		}
	}
	if rbErr != nil {
		err = errors.Join(err, rbErr)
	}
	if infra {
		return &infrastructureError{err}
	}
	return err
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

// Package entry is how an entry point other than a Watermill router (package inboxhttp) and the
// inbox middleware hand each other what one delivery needs beyond the message: its
// fingerprint, the response to record with the claim, and what the middleware found. It travels
// in the message's context under a key only this module can set, so nothing a producer puts in
// a message (its metadata least of all) can pose as it.
package entry

import "context"

// Exchange is one delivery's: the entry point fills Fingerprint and OnCommitted before the
// middleware runs and Response in its handler; the middleware fills the rest.
type Exchange struct {
	// Fingerprint is the delivery's fingerprint, as the entry point computed it; nil: none.
	Fingerprint []byte
	// Response is the response the handler produced, recorded with the claim; nil: none.
	Response []byte
	// OnCommitted, if set, is called by [Exchange.SetCommitted], the moment the key is known
	// committed and before anything is published, so that the entry point stops treating the
	// key as in flight while the publishing runs.
	OnCommitted func()

	// Committed is set by the middleware once the claim is committed: by this delivery's
	// COMMIT, or found committed by an earlier one (a duplicate). What fails after it (the
	// publishing of the recorded messages) does not undo it.
	Committed bool
	// Duplicate is set by the middleware when the key was committed by an earlier delivery.
	Duplicate bool
	// Recorded is, for a duplicate, the response its first delivery recorded; nil if none was
	// (a broker message claimed the key first).
	Recorded []byte
	// CommitFailed is set by the middleware when this delivery's COMMIT (in write-behind mode
	// the one request of claim, writes and COMMIT) returned an error: the server may have made
	// it durable before the error, so whether the key is committed is not known.
	CommitFailed bool
}

// SetCommitted records that the key is committed, by an earlier delivery if duplicate (whose
// recorded response is recorded), and calls OnCommitted.
func (e *Exchange) SetCommitted(duplicate bool, recorded []byte) {
	e.Committed, e.Duplicate, e.Recorded = true, duplicate, recorded
	if e.OnCommitted != nil {
		e.OnCommitted()
	}
}

type exchangeKey struct{}

// With returns ctx carrying ex.
func With(ctx context.Context, ex *Exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, ex)
}

// From returns the Exchange in ctx, or nil for a delivery from a router.
func From(ctx context.Context) *Exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*Exchange)
	return ex
}

// Package entry is how an entry point other than a Watermill router (package inboxhttp) and the
// inbox middleware hand each other what one delivery needs beyond the message: its
// fingerprint, the response to record with the claim, and what the middleware found. It travels
// in the message's context under a key only this module can set, so nothing a producer puts in
// a message (its metadata least of all) can pose as it.
package entry

import "context"

// Exchange is one delivery's: the entry point fills Fingerprint before the middleware runs and
// Response in its handler; the middleware fills the rest.
type Exchange struct {
	// Fingerprint is the delivery's fingerprint, as the entry point computed it; nil: none.
	Fingerprint []byte
	// Response is the response the handler produced, recorded with the claim; nil: none.
	Response []byte

	// Committed is set by the middleware once the claim is committed: by this delivery's
	// COMMIT, or found committed by an earlier one (a duplicate). What fails after it (the
	// publishing of the recorded messages) does not undo it.
	Committed bool
	// Duplicate is set by the middleware when the key was committed by an earlier delivery.
	Duplicate bool
	// Recorded is, for a duplicate, the response its first delivery recorded; nil if none was
	// (a broker message claimed the key first).
	Recorded []byte
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

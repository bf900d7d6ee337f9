// Package cause names, for the handler kit, why the middleware refused a handler's call,
// where one exported sentinel covers several causes: the kit tells a team the cause, a team's
// code needs only the sentinel.
package cause

import "errors"

var (
	// ErrAfterReturn is wrapped, with inbox.ErrNoHandlerContext, by the error of a call made
	// with a handler's context after the handler returned.
	ErrAfterReturn = errors.New("the handler has returned")
	// ErrNotFromMiddleware is wrapped, with inbox.ErrNoHandlerContext, by the error of
	// ExecAtCommit with a context that never came from the inbox middleware.
	ErrNotFromMiddleware = errors.New("the context does not come from the inbox middleware")
	// ErrPublisherMismatch is wrapped by the error of a Publisher used with another store's
	// inbox, or of an inbox that publishes through another Publisher.
	ErrPublisherMismatch = errors.New("the publisher belongs to another inbox")
)

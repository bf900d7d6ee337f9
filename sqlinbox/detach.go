package sqlinbox

import "context"

// detachedAfterClaim returns a context for database/sql's BeginTx that follows parent until
// detach is called, and then never ends. database/sql rolls a transaction back when the
// context it began with is done; the inbox wants that while it claims (a cancelled delivery
// stops waiting), but not later: the middleware, not a subscriber closing down, decides
// whether a handler's transaction commits.
//
// It is a plain cancel context, so the contexts derived from it need no watcher goroutine.
func detachedAfterClaim(parent context.Context) (ctx context.Context, detach func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() { stop() }
}

package inbox

import (
	"context"
	"sync"

	"github.com/inboxkit/watermill-inbox/internal/record"
)

// scopeCtxKey is unexported so that only this package can put a scope in a context.
type scopeCtxKey struct{}

// scope is what the middleware puts in the message context while the handler runs: the
// claimed key, the claim's transaction (nil in write-behind mode) and what the handler
// queued or published for the commit. It ends when the handler returns. The handler may
// call [ExecAtCommit] and [Publisher.Publish] from several goroutines.
type scope struct {
	inbox *middleware
	key   string
	tx    Tx // nil in write-behind mode

	mu        sync.Mutex
	ended     bool             // the handler returned: later writes and publishes are errors
	queued    []Statement      // write-behind mode only; in claim-first mode tx queues them
	published []record.Message // recorded by a Publisher, published after the commit
}

func withScope(ctx context.Context, sc *scope) context.Context {
	return context.WithValue(ctx, scopeCtxKey{}, sc)
}

func scopeFrom(ctx context.Context) (*scope, bool) {
	sc, ok := ctx.Value(scopeCtxKey{}).(*scope)
	return sc, ok
}

// end closes the scope to further queued statements and publishes, and returns what was
// recorded.
func (c *scope) end() (queued []Statement, published []record.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	return c.queued, c.published
}

// TxFromContext returns the transaction in which the middleware claimed the message, in the
// driver's own type: pgx.Tx for a store made by sqlinbox.NewPgx, *sql.Tx for one made by
// sqlinbox.NewDB or sqlinbox.NewMultiStatement, or
// the data layer's own type when the store begins its transactions through the data layer
// (sqlinbox.Config.Begin: *sqlx.Tx, bun.Tx). Writes made through it commit or roll back
// together with the claim.
//
// ok is false when ctx does not come from the inbox middleware, when T is not the store's
// transaction type, and always in write-behind mode ([Config.WriteBehind]), where the handler
// runs before any transaction begins; it never panics. The transaction belongs to the
// middleware: do not commit or roll it back in the handler.
func TxFromContext[T any](ctx context.Context) (tx T, ok bool) {
	c, found := scopeFrom(ctx)
	if !found || c.tx == nil {
		return tx, false
	}
	tx, ok = c.tx.Handle().(T)
	return tx, ok
}

// KeyFromContext returns the idempotency key the middleware claims for the message, in both
// modes. Pass it on as an idempotency key to systems outside the database (payment
// providers, email services), whose effects the inbox transaction cannot roll back.
func KeyFromContext(ctx context.Context) (key string, ok bool) {
	c, found := scopeFrom(ctx)
	if !found {
		return "", false
	}
	return c.key, true
}

// publishNowCtxKey marks a context that [WithPublishNow] returned.
type publishNowCtxKey struct{}

// WithPublishNow returns a copy of ctx under which a [Publisher] publishes at once, outside any
// inbox transaction: for code that is not an inbox handler (a start-up job, an HTTP endpoint
// not behind inboxhttp) and publishes through the same Publisher, or the same cqrs buses, as
// the handlers:
//
//	err := commandBus.Send(inbox.WithPublishNow(ctx), cmd)
//
// Such a message is not recorded and is tied to no database change: it leaves even if what
// the caller writes afterwards fails. Without [WithPublishNow], a [Publisher] refuses a message whose
// context carries no inbox claim ([ErrNoHandlerContext]). Inside a handler keep the handler's
// context: WithPublishNow takes precedence over the claim there too.
func WithPublishNow(ctx context.Context) context.Context {
	return context.WithValue(ctx, publishNowCtxKey{}, true)
}

func publishesNow(ctx context.Context) bool {
	now, _ := ctx.Value(publishNowCtxKey{}).(bool)
	return now
}

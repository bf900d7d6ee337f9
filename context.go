package inbox

import "context"

// claimCtxKey is unexported so that only this package can put a claim in a context.
type claimCtxKey struct{}

// claimed is what the middleware puts in the message context while the handler runs.
type claimed struct {
	tx  Tx
	key string
}

func withClaim(ctx context.Context, c claimed) context.Context {
	return context.WithValue(ctx, claimCtxKey{}, c)
}

// TxFromContext returns the transaction in which the middleware claimed the message, in the
// driver's own type: pgx.Tx for a sqlinbox.PgxStore, *sql.Tx for a sqlinbox.SQLStore.
// Writes made through it commit or roll back together with the claim.
//
// ok is false when ctx does not come from the inbox middleware or when T is not the
// store's transaction type; it never panics. The transaction belongs to the middleware:
// do not commit or roll it back in the handler.
func TxFromContext[T any](ctx context.Context) (tx T, ok bool) {
	c, found := ctx.Value(claimCtxKey{}).(claimed)
	if !found {
		return tx, false
	}
	tx, ok = c.tx.Driver().(T)
	return tx, ok
}

// KeyFromContext returns the idempotency key the middleware claimed for the message.
// Pass it on as an idempotency key to systems outside the database (payment providers,
// email services), whose effects the inbox transaction cannot roll back.
func KeyFromContext(ctx context.Context) (key string, ok bool) {
	c, found := ctx.Value(claimCtxKey{}).(claimed)
	if !found {
		return "", false
	}
	return c.key, true
}

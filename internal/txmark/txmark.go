// Package txmark marks the requests a store sends that begin or end a transaction by
// themselves, not through database/sql's BeginTx, Commit or Rollback (a multi-statement
// request that starts with the store's BEGIN or ends with its COMMIT), so that the handler
// kit's connections know where a delivery's transaction begins and ends without reading the
// request's SQL.
package txmark

import "context"

// Mark is what a request does to its connection's transaction.
type Mark uint8

const (
	// Begins: the request begins a transaction on its connection.
	Begins Mark = 1 << iota
	// Ends: the request ends its connection's transaction (COMMIT or ROLLBACK), if it
	// succeeds.
	Ends
)

type key struct{}

// With returns ctx carrying m, for the driver calls of one request.
func With(ctx context.Context, m Mark) context.Context { return context.WithValue(ctx, key{}, m) }

// Of returns the mark ctx carries; 0 for none.
func Of(ctx context.Context) Mark {
	if ctx == nil {
		return 0
	}
	m, _ := ctx.Value(key{}).(Mark)
	return m
}

package inbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoInboxTx is returned by Queue for a context that does not come from the inbox
// middleware.
var ErrNoInboxTx = errors.New("inbox: no inbox transaction in the context")

// StatementQueuer is implemented by a Tx that can defer statements to its commit. Both
// sqlinbox stores implement it.
type StatementQueuer interface {
	// Queue adds a statement to run, after the ones queued before it, when the transaction
	// commits. It is safe for concurrent use.
	Queue(sql string, args ...any)
}

// Queue defers a write to the commit of the inbox transaction in ctx: the write-behind path
// for handlers that only write. The queued statements run in order after the handler
// returns and before the claim commits, in the same transaction; on pgx they travel with
// COMMIT in one pipelined batch, so a message costs two round trips in all (the claim's and
// the commit's) however many statements it queues. The handler sees neither their results
// nor their errors: an error in any of them rolls the whole transaction back and the message
// is nacked. sql uses the driver's placeholders ($1 on PostgreSQL, ? on MySQL and SQLite).
//
// Use TxFromContext instead for statements whose results the handler needs.
func Queue(ctx context.Context, sql string, args ...any) error {
	c, ok := ctx.Value(claimCtxKey{}).(claimed)
	if !ok {
		return ErrNoInboxTx
	}
	queuer, ok := c.tx.(StatementQueuer)
	if !ok {
		return fmt.Errorf("inbox: the store's transaction %T cannot queue statements", c.tx)
	}
	queuer.Queue(sql, args...)
	return nil
}

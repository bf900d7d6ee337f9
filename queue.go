package inbox

import (
	"context"
	"fmt"
)

// Statement is a write queued with Queue: SQL text in the driver's placeholder style and
// its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// StatementQueuer is implemented by a Tx that can defer statements to its commit. Both
// sqlinbox stores implement it.
type StatementQueuer interface {
	// Queue adds a statement to run, after the ones queued before it, when the transaction
	// commits. It is safe for concurrent use.
	Queue(sql string, args ...any)
}

// Queue defers a write to the commit of the inbox transaction in ctx. The queued statements
// run in order after the handler returns and before the claim commits, in the same
// transaction; an error in any of them rolls the whole transaction back and the message is
// nacked. The handler sees neither their results nor their errors. sql uses the driver's
// placeholders ($1 on PostgreSQL, ? on MySQL and SQLite).
//
// With the default claim-first mode, the statements travel with COMMIT: on pgx a message
// costs two round trips in all (the claim's and the commit's) however many it queues, and
// so it does on MySQL with a store made by sqlinbox.NewMultiStatement. In write-behind mode
// (Config.WriteBehind) they travel with the claim itself: one round trip on pgx and with
// sqlinbox.NewMultiStatement.
//
// Queue returns ErrNoInboxTx for a context that does not come from the inbox middleware, and
// an error once the handler has returned. Use TxFromContext instead for statements whose
// results the handler needs.
func Queue(ctx context.Context, sql string, args ...any) error {
	c, ok := scopeFrom(ctx)
	if !ok {
		return ErrNoInboxTx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return fmt.Errorf("%w: Queue called after the handler returned", ErrClaimEnded)
	}
	if c.tx == nil {
		c.queued = append(c.queued, Statement{SQL: sql, Args: args})
		return nil
	}
	queuer, ok := c.tx.(StatementQueuer)
	if !ok {
		return fmt.Errorf("inbox: the store's transaction %T cannot queue statements", c.tx)
	}
	queuer.Queue(sql, args...)
	return nil
}

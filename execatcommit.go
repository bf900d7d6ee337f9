package inbox

import (
	"context"
	"fmt"

	"github.com/inboxkit/watermill-inbox/internal/cause"
)

// Statement is a write deferred with [ExecAtCommit]: SQL text in the driver's placeholder style
// and its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// ExecAtCommit defers a write to the commit of the inbox transaction in ctx. The deferred
// statements run in order after the handler returns and before the claim commits, in the
// same transaction; an error in any of them rolls the whole transaction back and the message
// is nacked. The handler sees neither their results nor their errors. sql uses the driver's
// placeholders ($1 on PostgreSQL, ? on MySQL and SQLite).
//
// With the default claim-first mode, the statements travel with COMMIT: on pgx a message
// costs two round trips in all (the claim's and the commit's) however many it defers, and so
// it does on MySQL with a store made by sqlinbox.NewMultiStatement. In write-behind mode
// ([Config.WriteBehind]) they travel with the claim itself: one round trip on pgx and with
// sqlinbox.NewMultiStatement.
//
// [ExecAtCommit] returns an error wrapping [ErrNoHandlerContext] for a context that carries no
// running inbox handler. Use [TxFromContext] instead for statements whose results the handler
// needs.
func ExecAtCommit(ctx context.Context, sql string, args ...any) error {
	c, ok := scopeFrom(ctx)
	if !ok {
		return fmt.Errorf("%w: ExecAtCommit: %w", ErrNoHandlerContext, cause.ErrNotFromMiddleware)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return fmt.Errorf("%w: ExecAtCommit called after %w", ErrNoHandlerContext, cause.ErrAfterReturn)
	}
	if c.tx == nil {
		c.queued = append(c.queued, Statement{SQL: sql, Args: args})
		return nil
	}
	c.tx.ExecAtCommit(sql, args...)
	return nil
}

package sqlinbox

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// tableRecheckInterval is how long a store refuses messages on the verdict of a failed table
// check before it checks the table again, so that a table fixed while the process runs is
// used without a restart, and a refused table costs no catalog query per message. The
// messages it refuses are retried (inbox.ShouldRetry waits up to 2 s between attempts), so
// a table fixed while the service runs is used within this interval and one such wait:
// within 10 s.
const tableRecheckInterval = 5 * time.Second

// tableGuard is a store's table check, run before its first claim (see [Store.CheckTable]).
// A check that passes also keeps what the store's statements need of the table's shape: the
// name of its primary key, which IsDuplicateKey compares with the constraint a failed claim
// names, and whether it has the column unpublished, which turns on the marks (see
// [RelaySQL]).
type tableGuard struct {
	*verdict
	primaryKey  atomic.Pointer[string]
	unpublished atomic.Bool
}

// tableShape is what a passing check read of the table.
type tableShape struct {
	primaryKey  string
	unpublished bool // the table has the column unpublished, and the dialect its SQL
}

func newTableGuard(logger watermill.LoggerAdapter, table Table) *tableGuard {
	return &tableGuard{verdict: newVerdict(ErrTableMismatch, tableRecheckInterval, logger,
		"Inbox table refused: every message fails until it is fixed", watermill.LogFields{"table": table.Quoted})}
}

// passing returns describe as a check that keeps the table's shape when it passes.
func (g *tableGuard) passing(describe func(context.Context) (tableShape, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		shape, err := describe(ctx)
		if err == nil {
			g.primaryKey.Store(&shape.primaryKey)
			g.unpublished.Store(shape.unpublished)
		}
		return err
	}
}

// withKey returns t with the name of its primary key that the last passing check read.
func (g *tableGuard) withKey(t Table) Table {
	if key := g.primaryKey.Load(); key != nil {
		t.PrimaryKey = *key
	}
	return t
}

package sqlinbox

import (
	"sync"
)

// statementQueue holds the statements a handler deferred to the commit with
// inbox.ExecAtCommit.
type statementQueue struct {
	mu         sync.Mutex
	statements []statement
}

// ExecAtCommit implements inbox.Tx.
func (q *statementQueue) ExecAtCommit(sql string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.statements = append(q.statements, statement{sql: sql, args: args, kind: kindQueued})
}

// take returns the queued statements and empties the queue.
func (q *statementQueue) take() []statement {
	q.mu.Lock()
	defer q.mu.Unlock()
	statements := q.statements
	q.statements = nil
	return statements
}

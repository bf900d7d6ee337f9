package sqlinbox

import (
	"sync"
)

// statementQueue holds the statements a handler deferred to the commit with inbox.Queue.
type statementQueue struct {
	mu         sync.Mutex
	statements []statement
}

// Queue implements inbox.StatementQueuer.
func (q *statementQueue) Queue(sql string, args ...any) {
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

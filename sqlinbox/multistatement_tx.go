package sqlinbox

import (
	"context"
	"database/sql/driver"

	"github.com/inboxkit/watermill-inbox/internal/txmark"
)

// multiStatementTx is a transaction that beginWith began and BeginTx adopted.
type multiStatementTx struct {
	c *multiStatementConn
	// committed: a request ending in COMMIT committed it.
	committed bool
}

func (t *multiStatementTx) Commit() error { return t.end("COMMIT") }

func (t *multiStatementTx) Rollback() error { return t.end("ROLLBACK") }

func (t *multiStatementTx) end(statement string) error {
	if t.c.tx != t {
		return driver.ErrBadConn
	}
	t.c.tx = nil
	if t.committed {
		return nil
	}
	// No context: database/sql ends a transaction with none (it watches the one the
	// transaction began with itself).
	_, err := t.c.execDriver(txmark.With(context.Background(), txmark.Ends), statement, nil)
	return err
}

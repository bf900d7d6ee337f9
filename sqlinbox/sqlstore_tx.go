package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// sqlTx adapts a *sql.Tx to inbox.Tx. database/sql ends a transaction with the context it
// began with, so Rollback takes none.
type sqlTx struct {
	tx *sql.Tx
	// handle is what handlers get: tx, or the data layer's transaction over it (Config.Begin).
	handle any
	store  *SQLStore
	claim  inbox.Claim
	// conn, set when a MultiStatementStore began tx in the claim's request, holds the
	// connection until the transaction ends, and the commit is one request.
	conn *sql.Conn
	statementQueue
}

var _ inbox.StatementQueuer = (*sqlTx)(nil)

func (t *sqlTx) Driver() any { return t.handle }

// Commit runs the queued statements and the record of produced messages, then commits.
// database/sql cannot pipeline them: each is a round trip, unless a MultiStatementStore
// began the transaction in the claim's request: then they go with COMMIT as one request.
func (t *sqlTx) Commit(ctx context.Context, produced []byte) error {
	statements := t.take()
	if produced != nil {
		statements = append(statements, queuedStatement{t.store.sql.record, []any{produced, t.claim.Consumer, t.claim.Key}})
	}
	if t.conn != nil {
		defer t.conn.Close()
		return t.commitInRequest(ctx, statements)
	}
	for _, q := range statements {
		if _, err := t.tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			err = sqlEnded(fmt.Errorf("sqlinbox: before commit: %w", err))
			if rbErr := t.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
				err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
			}
			return err
		}
	}
	return sqlEnded(t.tx.Commit())
}

func (t *sqlTx) Rollback(context.Context) error {
	if t.conn != nil {
		defer t.conn.Close()
	}
	return sqlEnded(t.tx.Rollback())
}

// sqlEnded marks the error of a transaction the handler already committed or rolled back.
func sqlEnded(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// pgxTx is the transaction of one claimed message, on a connection the store holds until
// Commit or Rollback.
type pgxTx struct {
	conn  *pgxpool.Conn
	tx    pgx.Tx // what the handler writes through
	store *PgxStore
	claim inbox.Claim
	statementQueue
}

var _ inbox.StatementQueuer = (*pgxTx)(nil)

func (t *pgxTx) Driver() any { return t.tx }

// Commit sends the queued statements, the record of produced messages and COMMIT in one
// pipelined batch: one round trip, whatever the handler queued; with nothing to send but
// COMMIT, pgx's Tx.Commit sends it. It always releases the connection.
func (t *pgxTx) Commit(ctx context.Context, produced []byte) error {
	defer t.conn.Release()
	c := t.conn.Conn()
	if c.PgConn().TxStatus() == 'I' {
		return fmt.Errorf("%w: commit", inbox.ErrTxEndedByHandler)
	}
	queued := t.take()
	if len(queued) == 0 && produced == nil {
		return pgxEnded(t.tx.Commit(ctx))
	}
	if err := t.store.prepareNamed(ctx, c, []string{t.store.sql.record, sqlCommit}, queued); err != nil {
		return endFailed(ctx, c, err)
	}
	batch := &pgx.Batch{}
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	if produced != nil {
		batch.Queue(t.store.sql.record, produced, t.claim.Consumer, t.claim.Key)
	}
	batch.Queue(sqlCommit)
	if _, err := sendBatch(ctx, c, batch); err != nil {
		return endFailed(ctx, c, fmt.Errorf("sqlinbox: commit batch: %w", err))
	}
	return nil
}

// Rollback ends the transaction and releases the connection.
func (t *pgxTx) Rollback(ctx context.Context) error {
	defer t.conn.Release()
	return pgxEnded(t.tx.Rollback(ctx))
}

// pgxEnded marks the error of a transaction the handler already committed or rolled back.
func pgxEnded(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

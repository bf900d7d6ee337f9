package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// pgxSession is one message on a connection of a pgx pool, which it sends statements to in
// pipelined batches: one round trip each.
type pgxSession struct {
	pool *pgxPool
	conn *pgxpool.Conn
	tx   pgx.Tx // the transaction begin began
	// handler is what the handler writes through: tx, keeping the errors it met in met.
	handler *pgxTx
	met     metErrors
}

// The statements that end a transaction in a batch. A batch's results end the transaction on
// the connection; pgx's Tx is not involved.
const (
	sqlCommit   = "COMMIT"
	sqlRollback = "ROLLBACK"
)

func (s *pgxSession) begin(ctx context.Context, first []statement) (int, error) {
	c := s.conn.Conn()
	// ROLLBACK and the read of the committed claim too: after a duplicate the transaction is
	// aborted, and the server refuses to prepare anything until it ends.
	if err := s.pool.prepare(ctx, c, first, sqlRollback, s.pool.selectClaim()); err != nil {
		return failedSetup, err
	}
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	for _, st := range first {
		batch.Queue(st.sql, st.args...)
	}
	results := c.SendBatch(ctx, batch)
	s.tx = results.Tx()
	s.handler = &pgxTx{inner: s.tx, met: &s.met}
	failed, err := readResults(results, first)
	if closeErr := results.Close(); err == nil && closeErr != nil {
		return len(first) - 1, closeErr
	}
	return failed, err
}

// readResults reads the results of a batch that began with BEGIN and went on with
// statements; it returns the position of the one that failed.
func readResults(results pgx.BatchResults, statements []statement) (int, error) {
	if _, err := results.Exec(); err != nil {
		return failedBegin, err
	}
	for i, st := range statements {
		if st.found == nil {
			if _, err := results.Exec(); err != nil {
				return i, err
			}
			continue
		}
		var row any
		switch err := results.QueryRow().Scan(&row); {
		case errors.Is(err, pgx.ErrNoRows):
			*st.found = false
		case err != nil:
			return i, err
		default:
			*st.found = true
		}
	}
	return 0, nil
}

func (s *pgxSession) handle() any { return s.handler }

// commit sends statements and COMMIT in one batch; with nothing but COMMIT to send, pgx's
// Tx.Commit sends it.
func (s *pgxSession) commit(ctx context.Context, statements []statement) (int, error) {
	c := s.conn.Conn()
	if c.PgConn().TxStatus() == 'I' {
		return len(statements), fmt.Errorf("%w: commit", inbox.ErrTxEndedByHandler)
	}
	if err := s.met.firstRefusal(); err != nil {
		// The handler went on after its pgx.Tx refused a statement: what it meant to commit
		// is not what the transaction holds.
		return len(statements), fmt.Errorf("sqlinbox: commit: the handler's pgx.Tx refused one of its statements: %w", err)
	}
	if len(statements) == 0 {
		return 0, pgxEnded(s.tx.Commit(ctx))
	}
	if err := s.pool.prepare(ctx, c, statements, sqlCommit); err != nil {
		return failedSetup, err
	}
	batch := &pgx.Batch{}
	for _, st := range statements {
		batch.Queue(st.sql, st.args...)
	}
	batch.Queue(sqlCommit)
	failed, err := sendBatch(ctx, c, batch)
	if s.pool.simple && refusedWhole(failed, err) {
		return failedUnknown, fmt.Errorf("%w (%s)", err, refusedWholeNote)
	}
	return failed, err
}

func (s *pgxSession) run(ctx context.Context, statements []statement) (int, error) {
	c := s.conn.Conn()
	if err := s.pool.prepare(ctx, c, statements, s.pool.begin, sqlCommit, sqlRollback, s.pool.selectClaim()); err != nil {
		return failedSetup, err
	}
	batch := &pgx.Batch{}
	batch.Queue(s.pool.begin)
	for _, st := range statements {
		batch.Queue(st.sql, st.args...)
	}
	batch.Queue(sqlCommit)
	failed, err := sendBatch(ctx, c, batch)
	if s.pool.simple && refusedWhole(failed, err) {
		return failedUnknown, fmt.Errorf("%w (%s)", err, refusedWholeNote)
	}
	return failed - 1, err // the batch's BEGIN is failedBegin; its COMMIT len(statements)
}

// In the simple protocol pgx sends a batch as one query string, which the server parses
// whole before it runs any of it: a syntax error in any statement refuses them all, and
// comes back as the first statement's error, whichever statement holds it.
const refusedWholeNote = "the server refused the whole batch and ran none of it: in the simple protocol a syntax error " +
	"in any of its statements, the handler's queued ones most likely, refuses them all"

// refusedWhole reports whether a batch sent in the simple protocol failed at its first
// statement with a syntax error, which is the whole batch's.
func refusedWhole(failed int, err error) bool {
	var pgErr *pgconn.PgError
	return failed == 0 && errors.As(err, &pgErr) && pgErr.Code == "42601"
}

func (s *pgxSession) rollback(ctx context.Context) error { return pgxEnded(s.tx.Rollback(ctx)) }

// rollbackAndSelect sends ROLLBACK and the read of the committed claim in one batch.
func (s *pgxSession) rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error) {
	c := s.conn.Conn()
	if s.pool.describes && c.PgConn().TxStatus() == 'E' {
		// The server describes nothing in an aborted transaction: ROLLBACK goes first, alone
		// (a statement without parameters is one round trip in every mode). The read then
		// runs outside a transaction, where a pooler may run describe-exec's two round trips
		// on two server connections: it runs in exec mode, in one.
		if _, err := c.Exec(ctx, sqlRollback); err != nil {
			return nil, fmt.Errorf("sqlinbox: end the duplicate's transaction: %w", err)
		}
		return scanClaim(c.QueryRow(ctx, read.sql, append([]any{pgx.QueryExecModeExec}, read.args...)...), read.marks)
	}
	batch := &pgx.Batch{}
	batch.Queue(sqlRollback)
	batch.Queue(read.sql, read.args...)
	results := c.SendBatch(ctx, batch)
	_, err := results.Exec()
	var prior *inbox.Record
	if err == nil {
		prior, err = scanClaim(results.QueryRow(), read.marks)
	} else {
		err = fmt.Errorf("sqlinbox: end the duplicate's transaction: %w", err)
	}
	if closeErr := results.Close(); err == nil && closeErr != nil {
		err = fmt.Errorf("sqlinbox: read the committed claim: %w", closeErr)
	}
	return prior, err
}

// abort rolls back the transaction a failed batch left open, if the connection still works;
// a broken connection is closed when it is released.
func (s *pgxSession) abort(ctx context.Context, cause error) error {
	c := s.conn.Conn()
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return cause
	}
	if _, err := c.Exec(context.WithoutCancel(ctx), sqlRollback); err != nil {
		return errors.Join(cause, fmt.Errorf("sqlinbox: rollback: %w", err))
	}
	return cause
}

// release gives the connection back; pgxpool closes one left in a transaction.
func (s *pgxSession) release() { s.conn.Release() }

// lost: pgx closes a connection it cannot go on with (a read or write that failed, a
// statement cut off by its context).
func (s *pgxSession) lost() bool { return s.conn.Conn().IsClosed() }

// raised: what the handler's statements through its pgx.Tx met.
func (s *pgxSession) raised(err error, transient func(error) bool) bool {
	return s.met.raised(err, transient)
}

// pgxEnded marks the error of a transaction the handler already committed or rolled back.
func pgxEnded(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

// sendBatch sends batch on c and reads every result. It returns the index of the statement
// that failed with its error; the statements after it did not run.
func sendBatch(ctx context.Context, c *pgx.Conn, batch *pgx.Batch) (failedAt int, err error) {
	results := c.SendBatch(ctx, batch)
	var tag pgconn.CommandTag
	for failedAt = 0; failedAt < batch.Len(); failedAt++ {
		if tag, err = results.Exec(); err != nil {
			break
		}
	}
	if closeErr := results.Close(); err == nil && closeErr != nil {
		return batch.Len() - 1, closeErr
	}
	if err == nil && tag.String() == "ROLLBACK" { // the server rolled back instead, as pgx's Commit reports
		return batch.Len() - 1, pgx.ErrTxCommitRollback
	}
	return failedAt, err
}

package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// dbSession is one message's transaction on a database/sql pool, which sends a statement at
// a time: a round trip each.
type dbSession struct {
	pool *dbPool
	tx   *sql.Tx
	// h is what handlers get: tx, or the data layer's transaction over it ([Config.Begin]).
	h any
	sqlSessionState
}

// begin begins with a context that follows ctx only until the claim is in: database/sql
// rolls a transaction back when the context it began with is done, which the inbox wants
// while it claims (a cancelled delivery stops waiting), but not later: the middleware, not a
// subscriber closing down, decides whether a handler's transaction commits.
func (s *dbSession) begin(ctx context.Context, first []statement) (int, error) {
	txCtx, detach := detachedAfterClaim(ctx)
	defer detach()
	handle, tx, err := s.pool.begin(txCtx, nil)
	if err != nil {
		return failedBegin, err
	}
	s.tx, s.h = tx, handle
	for i, st := range first {
		if err := execStatement(ctx, tx, st); err != nil {
			return i, err
		}
	}
	return 0, nil
}

// execStatement runs st in tx, and reads whether it returned a row if st asks.
func execStatement(ctx context.Context, tx *sql.Tx, st statement) error {
	if st.found == nil {
		_, err := tx.ExecContext(ctx, st.sql, st.args...)
		return err
	}
	var row any
	switch err := tx.QueryRowContext(ctx, st.sql, st.args...).Scan(&row); {
	case errors.Is(err, sql.ErrNoRows):
		*st.found = false
	case err != nil:
		return err
	default:
		*st.found = true
	}
	return nil
}

func (s *dbSession) handle() any { return s.h }

// mark sends statements in the transaction, when the handler first takes it: the claim's
// context is the delivery's, which is not at hand, and the statements are the store's own,
// without arguments of the handler's. A mark that fails rolls the transaction back at once,
// so that the handler's statements fail (sql.ErrTxDone) instead of running outside it: the
// error the mark met may be the transaction's end (a Galera node's write-set aborting it,
// whose 1213 goes to the next statement, the mark's), after which the server would run the
// handler's statements in autocommit.
func (s *dbSession) mark(statements []statement) error {
	for _, st := range statements {
		if err := execStatement(context.Background(), s.tx, st); err != nil {
			_ = s.rolledBack(s.tx.Rollback())
			return err
		}
	}
	return nil
}

func (s *dbSession) commit(ctx context.Context, statements []statement) (int, error) {
	for i, st := range statements {
		if err := execStatement(ctx, s.tx, st); err != nil {
			return i, sqlEnded(err)
		}
		if st.kind == kindTxCheck && st.found != nil && !*st.found {
			return i, errTxCheckFailed
		}
	}
	return len(statements), sqlEnded(s.tx.Commit())
}

// run begins and sends the statements one at a time; a claim that skipped a duplicate ends
// it, and the rest is not sent.
func (s *dbSession) run(ctx context.Context, statements []statement) (int, error) {
	if failed, err := s.begin(ctx, nil); err != nil {
		return failed, err
	}
	// The transaction follows ctx no more: what the handler queued commits or fails as a
	// whole, as in the claim-first mode.
	for i, st := range statements {
		if err := execStatement(ctx, s.tx, st); err != nil {
			return i, err
		}
		if st.found != nil && !*st.found {
			return i, errClaimSkipped
		}
	}
	return len(statements), s.tx.Commit()
}

func (s *dbSession) rollback(context.Context) error { return s.rolledBack(s.tx.Rollback()) }

// sqlSessionState is what a session on a [*sql.Tx] knows of its connection: whether a ROLLBACK
// failed on it.
type sqlSessionState struct{ broken bool }

// rolledBack returns the error of a ROLLBACK of the session's transaction, noting a failed one
// as the connection's: a ROLLBACK fails on a working connection only for a transaction that
// ended already (sql.ErrTxDone).
func (s *sqlSessionState) rolledBack(err error) error {
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		s.broken = true
	}
	return sqlEnded(err)
}

func (s *sqlSessionState) lost() bool { return s.broken }

// raised: database/sql shows the store nothing of the handler's statements on the [*sql.Tx],
// so an error counts by its code alone (see [Store.IsTransient]).
func (s *sqlSessionState) raised(err error, transient func(error) bool) bool { return transient(err) }

// rollbackAndSelect reads in the transaction, then rolls it back. Under READ COMMITTED the read
// takes a snapshot of its own, so it also sees a claim committed while this one waited for
// it; under REPEATABLE READ or SERIALIZABLE such a claim fails instead ("could not serialize
// access"), and the redelivery is the duplicate.
func (s *dbSession) rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error) {
	prior, err := scanClaim(s.tx.QueryRowContext(ctx, read.sql, read.args...), read.marks)
	if rbErr := s.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		err = errors.Join(err, fmt.Errorf("sqlinbox: end the duplicate's transaction: %w", rbErr))
	}
	return prior, err
}

func (s *dbSession) abort(_ context.Context, cause error) error {
	if s.tx == nil {
		return cause
	}
	if err := s.rolledBack(s.tx.Rollback()); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return errors.Join(cause, fmt.Errorf("sqlinbox: rollback: %w", err))
	}
	return cause
}

// queryString reads one string in the transaction, which InnoDB keeps open after a failed
// statement.
func (s *dbSession) queryString(ctx context.Context, query string) (v string, err error) {
	err = s.tx.QueryRowContext(ctx, query).Scan(&v)
	return v, err
}

// release: database/sql returned the connection when the transaction ended.
func (s *dbSession) release() {}

// sqlEnded marks the error of a transaction the handler already committed or rolled back.
func sqlEnded(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

// detachedAfterClaim returns a context for database/sql's BeginTx that follows parent until
// detach is called, and then never ends. It is a plain cancel context, so the contexts
// derived from it need no watcher goroutine.
func detachedAfterClaim(parent context.Context) (ctx context.Context, detach func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() { stop() }
}

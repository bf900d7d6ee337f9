package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	inbox "github.com/inboxkit/watermill-inbox"
)

// pgxTx is the [pgx.Tx] a handler gets on a store made by [NewPgx] or [NewPgxPipeline]: the
// inbox transaction's own, every call forwarded to it, with two things added. The errors its
// statements return are kept, so that the store can tell a deadlock the handler met on the
// inbox's transaction from one it met on another database (see [Store.IsTransient]); they are
// returned as pgx returned them, the same values. And a statement that would end the inbox
// transaction (see txGuard), or any statement once it has ended (the server reports its
// transaction status after every command), is refused before it is sent, with an error
// wrapping [inbox.ErrTxEndedByHandler], so that nothing after it runs in autocommit. A
// statement sent through Conn() or LargeObjects() bypasses it: its errors are judged by the
// session (a connection that closed) alone, and the commit finds a transaction it ended.
type pgxTx struct {
	inner pgx.Tx
	met   *metErrors
}

var _ pgx.Tx = (*pgxTx)(nil)

// metErrors keeps the last errors the statements of one inbox transaction returned. A handler
// may use its transaction from several goroutines in turn, so it has a lock.
type metErrors struct {
	mu   sync.Mutex
	errs []error
	// refusal is the first refusal of a statement (see pgxTx.refuse): the transaction can
	// no longer commit as the handler meant it, whatever the handler did with the refusal.
	refusal error
}

// refused keeps err as the refusal, if it is the first, and returns it.
func (m *metErrors) refused(err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refusal == nil {
		m.refusal = err
	}
	return err
}

// firstRefusal returns the first refusal, or nil.
func (m *metErrors) firstRefusal() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refusal
}

// maxMetErrors bounds what a transaction keeps: a handler that goes on after each failure
// would otherwise keep one error per statement. The error a handler returns is one of its
// last.
const maxMetErrors = 8

// add keeps err, if it is an error, and returns it.
func (m *metErrors) add(err error) error {
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) == maxMetErrors {
		m.errs = append(m.errs[:0], m.errs[1:]...)
	}
	m.errs = append(m.errs, err)
	return err
}

// raised reports whether err holds one of the errors kept that transient reports.
func (m *metErrors) raised(err error, transient func(error) bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, met := range m.errs {
		if transient(met) && errors.Is(err, met) {
			return true
		}
	}
	return false
}

func (t *pgxTx) Begin(ctx context.Context) (pgx.Tx, error) {
	inner, err := t.inner.Begin(ctx)
	if err != nil {
		return nil, t.met.add(err)
	}
	return &pgxTx{inner: inner, met: t.met}, nil
}

func (t *pgxTx) Commit(ctx context.Context) error   { return t.met.add(t.inner.Commit(ctx)) }
func (t *pgxTx) Rollback(ctx context.Context) error { return t.met.add(t.inner.Rollback(ctx)) }

func (t *pgxTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := t.refuse(""); err != nil {
		return 0, err
	}
	n, err := t.inner.CopyFrom(ctx, table, columns, rows)
	return n, t.met.add(err)
}

func (t *pgxTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if err := t.refuse(q.SQL); err != nil {
			return refusedBatch{err}
		}
	}
	return &pgxBatchResults{inner: t.inner.SendBatch(ctx, b), met: t.met}
}

func (t *pgxTx) LargeObjects() pgx.LargeObjects { return t.inner.LargeObjects() }

func (t *pgxTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.refuse(sql); err != nil {
		return nil, err
	}
	sd, err := t.inner.Prepare(ctx, name, sql)
	return sd, t.met.add(err)
}

func (t *pgxTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.refuse(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := t.inner.Exec(ctx, sql, args...)
	return tag, t.met.add(err)
}

func (t *pgxTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.refuse(sql); err != nil {
		return refusedRows{err}, err
	}
	rows, err := t.inner.Query(ctx, sql, args...)
	if err != nil {
		return rows, t.met.add(err)
	}
	return &pgxTxRows{Rows: rows, met: t.met}, nil
}

func (t *pgxTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.refuse(sql); err != nil {
		return refusedRows{err}
	}
	return pgxTxRow{inner: t.inner.QueryRow(ctx, sql, args...), met: t.met}
}

// refuse returns the refusal of a statement with text sql, or nil: the inbox transaction
// ended, or the statement would end it.
func (t *pgxTx) refuse(sql string) error {
	if c := t.inner.Conn(); c != nil && !c.PgConn().IsBusy() && c.PgConn().TxStatus() == 'I' {
		return t.met.refused(fmt.Errorf("sqlinbox: refused: the inbox transaction has ended, and the statement would "+
			"run in autocommit; nothing of it was sent: %w", inbox.ErrTxEndedByHandler))
	}
	if err := refuseTxEnd(Postgres{}, sql); err != nil {
		return t.met.refused(fmt.Errorf("sqlinbox: %w", err))
	}
	return nil
}

func (t *pgxTx) Conn() *pgx.Conn { return t.inner.Conn() }

// pgxTxRows keeps the errors of a query's rows.
type pgxTxRows struct {
	pgx.Rows
	met *metErrors
}

func (r *pgxTxRows) Err() error             { return r.met.add(r.Rows.Err()) }
func (r *pgxTxRows) Scan(dest ...any) error { return r.met.add(r.Rows.Scan(dest...)) }

func (r *pgxTxRows) Values() ([]any, error) {
	values, err := r.Rows.Values()
	return values, r.met.add(err)
}

// pgxTxRow keeps the error of a query's row.
type pgxTxRow struct {
	inner pgx.Row
	met   *metErrors
}

func (r pgxTxRow) Scan(dest ...any) error { return r.met.add(r.inner.Scan(dest...)) }

// pgxBatchResults keeps the errors of a batch's results.
type pgxBatchResults struct {
	inner pgx.BatchResults
	met   *metErrors
}

func (b *pgxBatchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := b.inner.Exec()
	return tag, b.met.add(err)
}

func (b *pgxBatchResults) Query() (pgx.Rows, error) {
	rows, err := b.inner.Query()
	if err != nil {
		return rows, b.met.add(err)
	}
	return &pgxTxRows{Rows: rows, met: b.met}, nil
}

func (b *pgxBatchResults) QueryRow() pgx.Row { return pgxTxRow{inner: b.inner.QueryRow(), met: b.met} }
func (b *pgxBatchResults) Close() error      { return b.met.add(b.inner.Close()) }
func (b *pgxBatchResults) Tx() pgx.Tx        { return b.inner.Tx() }

// refusedRows is what a refused call returns where pgx returns rows or a row: each of its
// methods returns the refusal.
type refusedRows struct{ err error }

func (r refusedRows) Close()                                       {}
func (r refusedRows) Err() error                                   { return r.err }
func (r refusedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r refusedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r refusedRows) Next() bool                                   { return false }
func (r refusedRows) Scan(...any) error                            { return r.err }
func (r refusedRows) Values() ([]any, error)                       { return nil, r.err }
func (r refusedRows) RawValues() [][]byte                          { return nil }
func (r refusedRows) Conn() *pgx.Conn                              { return nil }
func (r refusedRows) TypeMap() *pgtype.Map                         { return nil }

// refusedBatch is a refused batch's results.
type refusedBatch struct{ err error }

func (b refusedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b refusedBatch) Query() (pgx.Rows, error)         { return refusedRows(b), b.err }
func (b refusedBatch) QueryRow() pgx.Row                { return refusedRows(b) }
func (b refusedBatch) Close() error                     { return b.err }

// Tx: the batch was not sent, so it began none.
func (b refusedBatch) Tx() pgx.Tx { return nil }

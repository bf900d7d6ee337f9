package handlertest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgxTx is the [pgx.Tx] the handler gets from inbox.TxFromContext on a pgx store: the store's
// transaction, counting the handler's statements, failing the one the attempt injects
// without sending it, and refusing every use after the handler returned. A statement sent
// through Conn() or LargeObjects() bypasses it.
type pgxTx struct {
	inner  pgx.Tx
	a      *attempt
	nested bool // a savepoint (Begin on the inbox transaction): its Commit does not end it
}

var _ pgx.Tx = (*pgxTx)(nil)

func (t *pgxTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if _, err := t.a.handleUse("SAVEPOINT (Begin)"); err != nil {
		return nil, err
	}
	inner, err := t.inner.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxTx{inner: inner, a: t.a, nested: true}, nil
}

func (t *pgxTx) Commit(ctx context.Context) error {
	if err := t.end("Commit"); err != nil {
		return err
	}
	return t.inner.Commit(ctx)
}

func (t *pgxTx) Rollback(ctx context.Context) error {
	if err := t.end("Rollback"); err != nil {
		return err
	}
	return t.inner.Rollback(ctx)
}

// end records the handler's Commit or Rollback: of a savepoint it is a statement like any
// other, of the inbox transaction itself it ends what the middleware should end (and is
// passed on, so the outcome is the one production would see).
func (t *pgxTx) end(how string) error {
	if t.nested {
		_, err := t.a.handleUse(strings.ToUpper(how) + " of a savepoint")
		return err
	}
	if t.a.currentPhase() != phaseHandler {
		_, err := t.a.handleUse(how)
		return err
	}
	t.a.endedByHandler(how)
	return nil
}

func (t *pgxTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if _, err := t.a.handleUse(fmt.Sprintf("COPY %s (%s) FROM STDIN", table.Sanitize(), strings.Join(columns, ", "))); err != nil {
		return 0, err
	}
	return t.inner.CopyFrom(ctx, table, columns, rows)
}

// SendBatch counts a batch as one statement, named by its queries: failed, it fails whole
// and unsent, as a batch inside a transaction that fails at any query leaves nothing once
// the transaction rolls back.
func (t *pgxTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	queries := make([]string, 0, len(b.QueuedQueries))
	for _, q := range b.QueuedQueries {
		queries = append(queries, q.SQL)
	}
	if _, err := t.a.handleUse("batch: " + strings.Join(queries, "; ")); err != nil {
		return errBatch{err}
	}
	return t.inner.SendBatch(ctx, b)
}

func (t *pgxTx) LargeObjects() pgx.LargeObjects { return t.inner.LargeObjects() }

func (t *pgxTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.a.currentPhase() != phaseHandler {
		if _, err := t.a.handleUse("PREPARE " + sql); err != nil {
			return nil, err
		}
	}
	return t.inner.Prepare(ctx, name, sql)
}

func (t *pgxTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if _, err := t.a.handleUse(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.inner.Exec(ctx, sql, args...)
}

func (t *pgxTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if _, err := t.a.handleUse(sql); err != nil {
		return errRows{err}, err
	}
	return t.inner.Query(ctx, sql, args...)
}

func (t *pgxTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if _, err := t.a.handleUse(sql); err != nil {
		return errRow{err}
	}
	return t.inner.QueryRow(ctx, sql, args...)
}

func (t *pgxTx) Conn() *pgx.Conn { return t.inner.Conn() }

// errRow, errRows and errBatch carry a failed or refused call's error where pgx would
// carry the database's.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errRows struct{ err error }

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return nil }
func (r errRows) TypeMap() *pgtype.Map                         { return nil }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return errRows(b), b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }

// Tx returns no transaction: the batch was not sent, so it began none.
func (b errBatch) Tx() pgx.Tx { return nil }

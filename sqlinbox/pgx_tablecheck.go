package sqlinbox

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// CheckTable is SQLStore.CheckTable for the pgx store.
func (s *PgxStore) CheckTable(ctx context.Context) error {
	return s.guard.check(ctx, s.sql.table, s.describe)
}

// describe reads the table's shape in a transaction of its own: behind a pooler in
// transaction mode, a statement that the driver sends in steps (pgx's describe-exec mode)
// could otherwise have its steps run on two server connections and fail.
func (s *PgxStore) describe(ctx context.Context) (primaryKey string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		primaryKey, err = describeTable(ctx, s.sql.dialect, s.sql.table, func(ctx context.Context, text string, args ...any) (tableRows, error) {
			rows, err := tx.Query(ctx, text, args...)
			if err != nil {
				return nil, err
			}
			return pgxRows{rows}, nil
		})
		return err
	})
	return primaryKey, err
}

// guardTable returns nil once the store's table passed its check; see CheckTable.
func (s *PgxStore) guardTable(ctx context.Context) error {
	return s.guard.before(ctx, s.sql.table, s.describe)
}

// pgxRows gives pgx.Rows the Close of *sql.Rows.
type pgxRows struct{ rowsCloser }

type rowsCloser interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

func (r pgxRows) Close() error { r.rowsCloser.Close(); return r.Err() }

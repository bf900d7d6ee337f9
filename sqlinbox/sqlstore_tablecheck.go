package sqlinbox

import (
	"context"
	"fmt"
)

// CheckTable reads the inbox table's shape from the database's catalog and returns an error
// wrapping ErrTableMismatch if it cannot guard against duplicates (see ErrTableMismatch),
// another error if the catalog could not be read, nil if the table is fit. The store runs
// it before its first claim; call it from a readiness probe or a deployment check too. Its
// verdict is the store's: a refused table is refused by every claim from then on, a table
// that passes is used at once.
func (s *SQLStore) CheckTable(ctx context.Context) error {
	return s.guard.check(ctx, s.sql.table, s.describe)
}

// describe reads the table's shape in a transaction of its own: behind a pooler in
// transaction mode, a statement that the driver sends in steps (pgx's describe-exec mode)
// could otherwise have its steps run on two server connections and fail.
func (s *SQLStore) describe(ctx context.Context) (primaryKey string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("sqlinbox: read the inbox table's shape: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // it only read
	return describeTable(ctx, s.sql.dialect, s.sql.table, func(ctx context.Context, text string, args ...any) (tableRows, error) {
		rows, err := tx.QueryContext(ctx, text, args...)
		if err != nil {
			return nil, err
		}
		return rows, nil
	})
}

// guardTable returns nil once the store's table passed its check; see CheckTable.
func (s *SQLStore) guardTable(ctx context.Context) error {
	return s.guard.before(ctx, s.sql.table, s.describe)
}

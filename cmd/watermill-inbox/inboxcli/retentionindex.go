package inboxcli

import (
	"context"
	"fmt"
)

// retentionIndex reports whether the table has an index that starts with processed_at, by
// which each cleanup batch finds the oldest claims (Dialect.RetentionIndex); without one,
// every batch reads the whole table. Its absence is a problem of retention, not of the
// guard, so the table check does not refuse it.
func (d *inboxDB) retentionIndex(ctx context.Context) (bool, error) {
	query, args := d.dialect.RetentionIndex(d.store.Table())
	var n int64
	if err := d.db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return false, fmt.Errorf("look for the processed_at index: %w", err)
	}
	return n > 0, nil
}

// noRetentionIndex says what a table without the index lacks and how to add it.
func noRetentionIndex(table, dialect string) string {
	return fmt.Sprintf("inbox table %q has no index that starts with processed_at, so every cleanup batch reads the whole table: "+
		"create the one the DDL of \"watermill-inbox schema -dialect %s\" creates", table, dialect)
}

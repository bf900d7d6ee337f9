package sqlinbox

import (
	"context"
	"fmt"
)

// TableSize returns the bytes the inbox table and its indexes take, as the dialect measures
// them ([Dialect.TableSize]), and a note on what was measured.
func (s *Store) TableSize(ctx context.Context) (bytes int64, note string, err error) {
	queries := s.sql.dialect.TableSize(s.sql.table)
	if len(queries) == 0 {
		return 0, "", fmt.Errorf("sqlinbox: dialect %q cannot measure a table", s.sql.dialect.Name())
	}
	for _, q := range queries {
		size, qErr := s.pool.queryInt(ctx, q.SQL, q.Args...)
		bytes, note, err = size.Int64, q.Note, qErr
		if err == nil && size.Valid {
			break
		}
	}
	if err != nil {
		return 0, "", fmt.Errorf("sqlinbox: table size: %w", err)
	}
	return bytes, note, nil
}

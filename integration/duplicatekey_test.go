package integration

import (
	"context"
	"testing"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Each dialect's IsDuplicateKey recognises a duplicate of the inbox's primary key, as the
// database and its driver report it, and nothing else: not a violation of another unique
// index on the same table, not another constraint.
func TestDuplicateKeyIsThePrimaryKeyOnly(t *testing.T) {
	for name, dialect := range map[string]sqlinbox.Dialect{
		"pgx/postgres":          sqlinbox.Postgres{},
		"database-sql/postgres": sqlinbox.Postgres{},
		"database-sql/mariadb":  sqlinbox.MySQL{},
		"database-sql/sqlite":   sqlinbox.SQLite{},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := backends[name](t)
			table, err := dialect.ParseTable(b.table)
			if err != nil {
				t.Fatal(err)
			}
			// The key's name, as a store's table check reads it: InitializeSchema made the
			// table, so it is PostgreSQL's default (MySQL's is PRIMARY, SQLite's has none).
			if dialect.Name() == (sqlinbox.Postgres{}).Name() {
				table.PrimaryKey = b.table + "_pkey"
			}
			insert := dialect.InsertClaim(table)
			mustExec(t, b.direct, "CREATE UNIQUE INDEX "+b.table+"_hash ON "+b.table+" (payload_hash)")
			if err := b.direct.exec(ctx, insert, params(dialect, "billing", "order-1", []byte{1})...); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				what string
				args []any
				want bool
			}{
				{"the same consumer and key", []any{"billing", "order-1", []byte{2}}, true},
				{"another key with a payload_hash a unique index holds", []any{"billing", "order-2", []byte{1}}, false},
				{"a NULL consumer", []any{nil, "order-3", []byte{3}}, false},
			} {
				err := b.direct.exec(ctx, insert, params(dialect, tc.args...)...)
				if err == nil {
					t.Errorf("%s: the insert succeeded", tc.what)
					continue
				}
				if got := dialect.IsDuplicateKey(err, table); got != tc.want {
					t.Errorf("%s: IsDuplicateKey(%v) = %v, want %v", tc.what, err, got, tc.want)
				}
			}
		})
	}
}

// params returns values as dialect's statements take the inbox's own values.
func params(dialect sqlinbox.Dialect, values ...any) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = dialect.Param(v)
	}
	return out
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A schema-qualified table name works on every database that has schemas, in a schema that
// exists and in one that does not yet (a database on MariaDB): InitializeSchema creates the
// schema, the table and its index there, and claims go to it. SQLite refuses a qualified
// name, main's too.
func TestSchemaQualifiedTable(t *testing.T) {
	for _, tt := range []struct{ backend, schema, drop string }{
		{"pgx/postgres", "public", ""},
		{"database-sql/postgres", "public", ""},
		{"database-sql/mariadb", "test", ""},
		{"pgx/postgres", testenv.Name("fresh"), "DROP SCHEMA IF EXISTS %s CASCADE"},
		{"database-sql/postgres", testenv.Name("fresh"), "DROP SCHEMA IF EXISTS %s CASCADE"},
		{"database-sql/mariadb", testenv.Name("fresh"), "DROP DATABASE IF EXISTS %s"},
	} {
		t.Run(tt.backend+"/"+tt.schema, func(t *testing.T) {
			b := backends[tt.backend](t)
			table := tt.schema + "." + testenv.Name("inbox")
			t.Cleanup(func() {
				ctx := context.WithoutCancel(context.Background())
				_ = b.direct.exec(ctx, "DROP TABLE IF EXISTS "+table)
				if tt.drop != "" {
					_ = b.direct.exec(ctx, fmt.Sprintf(tt.drop, tt.schema))
				}
			})
			store, err := b.newStore(sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			initializer := store.(interface{ InitializeSchema(context.Context) error })
			for range 2 {
				if err := initializer.InitializeSchema(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			for i, wantNew := range []bool{true, false} {
				tx, prior, err := store.Claim(ctx, inbox.Claim{Consumer: "billing", Key: "order-1"})
				if err != nil {
					t.Fatal(err)
				}
				if (prior == nil) != wantNew {
					t.Fatalf("claim %d: new = %v, want %v", i+1, prior == nil, wantNew)
				}
				if tx != nil {
					if err := tx.Commit(ctx, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			wantRows(t, "claims in "+table, b.rows(t, table, ""), 1)
		})
	}
	t.Run("database-sql/sqlite", func(t *testing.T) {
		b := backends["database-sql/sqlite"](t)
		if _, err := b.newStore(sqlinbox.Config{Table: "main." + testenv.Name("inbox")}); !errors.Is(err, sqlinbox.ErrInvalidTableName) {
			t.Errorf("a store on main.inbox: %v, want ErrInvalidTableName", err)
		}
	})
}

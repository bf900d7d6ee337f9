package integration

import (
	"context"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A schema-qualified table name works on every database: InitializeSchema creates the table
// and its index there, and claims go to it.
func TestSchemaQualifiedTable(t *testing.T) {
	for name, schema := range map[string]string{
		"pgx/postgres":          "public",
		"database-sql/postgres": "public",
		"database-sql/mariadb":  "test",
		"database-sql/sqlite":   "main",
	} {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			table := schema + "." + testenv.Name("inbox")
			t.Cleanup(func() { _ = b.direct.exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
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
}

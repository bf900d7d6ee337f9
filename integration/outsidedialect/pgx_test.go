package outsidedialect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/integration/outsidedialect"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A PostgreSQL dialect of one's own reaches the pgx stores through Config.Dialect: NewPgx and
// NewPgxPipeline speak it (the table check's advice names it), create the table and claim in
// it; a dialect of another database is refused there, and NewDB and NewMultiStatement refuse
// the field, which they take as an argument.
func TestPgxStoresTakeADialectOfOnesOwn(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	constructors := map[string]func(sqlinbox.Config) (*sqlinbox.Store, error){
		"NewPgx": func(c sqlinbox.Config) (*sqlinbox.Store, error) { return sqlinbox.NewPgx(pool, c) },
		"NewPgxPipeline": func(c sqlinbox.Config) (*sqlinbox.Store, error) {
			return sqlinbox.NewPgxPipeline(pool, c, sqlinbox.PipelineConfig{})
		},
	}
	for name, construct := range constructors {
		t.Run(name, func(t *testing.T) {
			table := testenv.Name("pgxown")
			t.Cleanup(func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table) })
			store, err := construct(sqlinbox.Config{Table: table, Dialect: outsidedialect.Postgres{}})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.CheckTable(ctx); err == nil || !strings.Contains(err.Error(), "-dialect mypostgres") {
				t.Errorf("CheckTable of a missing table: %v, want advice naming -dialect mypostgres", err)
			}
			if err := store.InitializeSchema(ctx); err != nil {
				t.Fatal(err)
			}
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
			var claims int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&claims); err != nil || claims != 1 {
				t.Errorf("%d claims (%v), want 1", claims, err)
			}
			if _, err := construct(sqlinbox.Config{Table: table, Dialect: outsidedialect.MySQL{}}); err == nil ||
				!strings.Contains(err.Error(), "does not embed sqlinbox.Postgres") {
				t.Errorf("%s with a MySQL dialect: %v, want a refusal", name, err)
			}
			if _, err := construct(sqlinbox.Config{Table: table, Dialect: outsidedialect.Embedded{}}); err == nil ||
				!strings.Contains(err.Error(), "has no dialect inside") {
				t.Errorf("%s with a nil embedded dialect: %v, want a refusal", name, err)
			}
		})
	}
	db := open(t, "pgx", testenv.PostgresURL(t))
	if _, err := sqlinbox.NewDB(db, outsidedialect.Postgres{}, sqlinbox.Config{Dialect: outsidedialect.Postgres{}}); err == nil ||
		!strings.Contains(err.Error(), "Config.Dialect is for NewPgx") {
		t.Errorf("NewDB with Config.Dialect: %v, want a refusal", err)
	}
}

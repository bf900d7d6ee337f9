package migrations_test

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/watermill-inbox/examples/internal/sqlcsum"
	"github.com/inboxkit/watermill-inbox/examples/migrations/inboxdb"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

var record = flag.Bool("sqlc.record", false, "write sqlc.sum from the inputs and the generated files")

// sqlcVersion is the generator the go:generate line of migrations.go runs.
const sqlcVersion = "v1.31.1"

// sumFile records the SHA-256 of sqlc's inputs and of the files it generated from them.
const sumFile = "sqlc.sum"

// The inbox's migration in the folder, as the command-line tool wrote it.
const (
	inboxTable   = "app.billing_inbox"
	inboxVersion = "20261201000001"
)

// The committed migration is the library's: what "watermill-inbox schema -format
// golang-migrate" writes today, byte for byte.
func TestMigrationIsTheLibrarys(t *testing.T) {
	fsys, err := sqlinbox.MigrationFiles(sqlinbox.Postgres{}, inboxTable, sqlinbox.FormatGolangMigrate, inboxVersion)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil || len(entries) != 2 {
		t.Fatalf("the library's migration: %v, %v", entries, err)
	}
	for _, e := range entries {
		want, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("migrations", e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("migrations/%s is not the library's migration (%v); regenerate (see the package doc):\n%s", e.Name(), err, want)
		}
	}
}

// TestGeneratedCodeIsCurrent checks that inboxdb is what sqlc generated from the committed
// inputs: the checksums recorded in sqlc.sum when it was generated must match the inputs
// and the generated files now. Building sqlc (cgo, the PostgreSQL parser) takes minutes,
// too long for every CI run; set INBOX_TEST_SQLC to a sqlc binary to run sqlc diff as well.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	files := []string{"sqlc.yaml", "query.sql"}
	for _, pattern := range []string{"migrations/*.sql", "inboxdb/*.go"} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matches...)
	}
	sqlcsum.Check(t, sumFile, sqlcVersion, files, *record)
}

// The generated queries run against the table the folder's up files create: applied in
// order in a transaction that is rolled back, so that the schema app never outlives the
// test (another run of it waits for the first's CREATE SCHEMA to end).
func TestGeneratedQueriesRunOnTheMigratedTable(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ups, err := filepath.Glob("migrations/*.up.sql")
	if err != nil || len(ups) != 2 {
		t.Fatalf("up files: %v, %v", ups, err)
	}
	slices.Sort(ups)
	for _, up := range ups {
		ddl, err := os.ReadFile(up)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, string(ddl)); err != nil {
			t.Fatalf("%s: %v", up, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO app.billing_inbox (consumer, message_id) VALUES
		('billing', 'order-1'), ('billing', 'order-2'), ('shipping', 'order-1')`); err != nil {
		t.Fatal(err)
	}
	q := inboxdb.New(tx)
	rows, err := q.ClaimsPerConsumer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Consumer != "billing" || rows[0].Claims != 2 || rows[1].Consumer != "shipping" || rows[1].Claims != 1 {
		t.Errorf("ClaimsPerConsumer = %+v, want billing 2, shipping 1", rows)
	}
	at, err := q.ClaimedAt(ctx, inboxdb.ClaimedAtParams{Consumer: "shipping", MessageID: "order-1"})
	if err != nil || !at.Valid {
		t.Errorf("ClaimedAt(shipping, order-1) = %v, %v; want the time of the claim", at, err)
	}
}

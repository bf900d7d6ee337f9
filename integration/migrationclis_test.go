package integration

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A team's first day with its migration tool, as it runs it: the watermill-inbox command
// writes the migrations into the team's folder, and goose's and golang-migrate's own
// command lines apply them to a database where nothing exists yet, not even the schema.

// The command lines, and the variables that name a binary instead of building one.
var migrationCLIs = []struct {
	name, variable string
	dir, pkg, tags string // what go build builds, from this module's directory
}{
	{"watermill-inbox", "INBOX_TEST_WATERMILL_INBOX", "../cmd/watermill-inbox", ".", ""},
	// goose v3.30.0's command with the drivers these tests use (its build tags leave the others out).
	{"goose", "INBOX_TEST_GOOSE", ".", "github.com/pressly/goose/v3/cmd/goose", "no_clickhouse no_mssql no_vertica no_ydb no_libsql no_sqlite3"},
	// golang-migrate v4.20.1's command with its pgx v5 and MySQL drivers.
	{"migrate", "INBOX_TEST_MIGRATE", ".", "github.com/golang-migrate/migrate/v4/cmd/migrate", "pgx5 mysql"},
}

// commandLines returns the path of each command line named (all of them if none is) by
// name, built into a directory of t's (the versions this module requires) unless its
// variable names a binary. A build that fails skips t, or fails it when
// INBOX_TEST_REQUIRE_SERVICES=1.
func commandLines(t *testing.T, names ...string) map[string]string {
	t.Helper()
	bin := t.TempDir()
	paths := map[string]string{}
	for _, c := range migrationCLIs {
		if len(names) > 0 && !slices.Contains(names, c.name) {
			continue
		}
		if path := os.Getenv(c.variable); path != "" {
			paths[c.name] = path
			continue
		}
		path := filepath.Join(bin, c.name)
		args := []string{"build", "-o", path}
		if c.tags != "" {
			args = append(args, "-tags", c.tags)
		}
		cmd := exec.Command("go", append(args, c.pkg)...)
		cmd.Dir = c.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			if testenv.RequireServices() {
				t.Fatalf("build %s: %v\n%s", c.name, err, out)
			}
			t.Skipf("build %s (or set %s): %v\n%s", c.name, c.variable, err, out)
		}
		paths[c.name] = path
	}
	return paths
}

// runCommand runs a command line and fails t with its output if it fails.
func runCommand(t *testing.T, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// freshTarget is a database on which the tools migrate tables of schemas that do not exist.
type freshTarget struct {
	dialect sqlinbox.Dialect
	driver  string
	dsn     string // the database/sql DSN
	// goose and migrate are the tools' arguments before their command: what reaches the
	// database, with a version table of versions.
	goose, migrate func(dir, versions string) []string
	// dropSchema drops a schema the migrations created.
	dropSchema string
}

// On PostgreSQL (directly and through PgBouncer in transaction mode) and on MariaDB, three
// tables go into one folder within a second: two whose names differ only where the schema
// ends (app.billing_inbox, app_billing.inbox) and one whose name takes all 63 bytes, in schemas
// that do not exist, with MySQL's upgrade after its table. Each tool's command line applies
// them (with no duplicate version, no file of one table replacing another's): every table
// passes the store's check, has its processed_at index and takes a claim; the tool migrates
// all the way down, which drops the tables and leaves the schemas, which other tables may
// share; and up again.
func TestMigrationCommandLinesOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	tools := commandLines(t)
	pgURL := testenv.PostgresURL(t)
	mysqlDSN := testenv.MySQLDSN(t)
	pgTarget := func(u string) freshTarget {
		return freshTarget{
			dialect: sqlinbox.Postgres{}, driver: "pgx", dsn: u,
			// goose's command line caches statements by name unless told not to, which a
			// pooler in transaction mode breaks from the second run (docs/operating.md).
			goose: func(dir, versions string) []string {
				return []string{"-dir", dir, "-table", versions, "postgres", withQuery(t, u, "default_query_exec_mode", "exec")}
			},
			migrate: func(dir, versions string) []string {
				return []string{"-path", dir, "-database", "pgx5://" + strings.SplitN(withQuery(t, u, "x-migrations-table", versions), "://", 2)[1]}
			},
			dropSchema: "DROP SCHEMA IF EXISTS %s CASCADE",
		}
	}
	targets := map[string]freshTarget{
		"postgres": pgTarget(pgURL),
		"mariadb": {
			dialect: sqlinbox.MySQL{}, driver: "mysql", dsn: mysqlDSN,
			goose: func(dir, versions string) []string {
				return []string{"-dir", dir, "-table", versions, "mysql", mysqlDSN}
			},
			migrate: func(dir, versions string) []string {
				return []string{"-path", dir, "-database", "mysql://" + withMySQLParams(mysqlDSN, "x-migrations-table="+url.QueryEscape(versions))}
			},
			dropSchema: "DROP DATABASE IF EXISTS %s",
		},
	}
	// golang-migrate holds a session advisory lock from before the migration to after it,
	// which a shared pooler in transaction mode leaks (docs/operating.md): goose alone runs
	// through it.
	bouncer := pgTarget(testenv.PgBouncerURL(t, poolerServerConns))
	for name, target := range targets {
		for _, tool := range []string{"goose", "migrate"} {
			t.Run(name+"/"+tool, func(t *testing.T) {
				t.Parallel()
				runFreshMigration(t, tools, target, tool)
			})
		}
	}
	t.Run("postgres/pgbouncer/goose", func(t *testing.T) {
		t.Parallel()
		runFreshMigration(t, tools, bouncer, "goose")
	})
}

func runFreshMigration(t *testing.T, tools map[string]string, target freshTarget, tool string) {
	db, err := sql.Open(target.driver, target.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	prefix := strings.ToLower(testenv.Name("app"))
	long := prefix + "_b." + strings.Repeat("l", 63)
	tables := []string{prefix + ".billing_inbox", prefix + "_billing.inbox", long}
	versions := testenv.Name("versions")
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, schema := range []string{prefix, prefix + "_billing", prefix + "_b"} {
			_, _ = db.ExecContext(ctx, fmt.Sprintf(target.dropSchema, schema))
		}
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+versions)
	})

	format := map[string]string{"goose": "goose", "migrate": "golang-migrate"}[tool]
	dir := t.TempDir()
	began := time.Now()
	for _, table := range tables {
		runCommand(t, tools["watermill-inbox"], "schema", "-format", format, "-dialect", target.dialect.Name(), "-table", table, "-out", dir)
		if target.dialect.Name() == (sqlinbox.MySQL{}).Name() {
			runCommand(t, tools["watermill-inbox"], "schema", "-upgrade", "-format", format, "-dialect", target.dialect.Name(), "-table", table, "-out", dir)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files written in %s", len(entries), time.Since(began).Round(time.Millisecond))

	var up, down []string
	switch tool {
	case "goose":
		up, down = append(target.goose(dir, versions), "up"), append(target.goose(dir, versions), "reset")
	case "migrate":
		up, down = append(target.migrate(dir, versions), "up"), append(target.migrate(dir, versions), "down", "-all")
	}
	check := func(when string) {
		t.Helper()
		for _, table := range tables {
			store, err := sqlinbox.NewDB(db, target.dialect, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.CheckTable(ctx); err != nil {
				t.Fatalf("%s: CheckTable(%s) = %v", when, table, err)
			}
			query, args := target.dialect.RetentionIndex(store.Table())
			var indexes int
			if err := db.QueryRowContext(ctx, query, args...).Scan(&indexes); err != nil || indexes != 1 {
				t.Errorf("%s: %s has %d indexes on processed_at (%v), want 1", when, table, indexes, err)
			}
			tx, prior, err := store.Claim(ctx, inbox.Claim{Consumer: "billing", Key: when})
			if err != nil || prior != nil {
				t.Fatalf("%s: claim on %s: %v, %v", when, table, prior, err)
			}
			if err := tx.Commit(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	runCommand(t, tools[tool], up...)
	check("after up")
	runCommand(t, tools[tool], down...)
	for _, table := range tables {
		store, err := sqlinbox.NewDB(db, target.dialect, sqlinbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.CheckTable(ctx); err == nil || !strings.Contains(err.Error(), "it does not exist") {
			t.Errorf("after down: CheckTable(%s) = %v, want it gone", table, err)
		}
		if !schemaExists(t, db, target.dialect, store.Table().Schema) {
			t.Errorf("after down: schema %s of %s is gone; other tables may share it", store.Table().Schema, table)
		}
	}
	runCommand(t, tools[tool], up...)
	check("after up again")
}

// schemaExists reports whether the schema (a database on MySQL) exists.
func schemaExists(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, schema string) bool {
	t.Helper()
	query := "SELECT COUNT(*) FROM pg_namespace WHERE nspname = $1"
	if dialect.Name() == (sqlinbox.MySQL{}).Name() {
		query = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?"
	}
	var n int
	if err := db.QueryRowContext(context.Background(), query, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

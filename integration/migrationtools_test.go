package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratedb "github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/pressly/goose/v3"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A team creates the inbox table with its own migration tool from the files of
// sqlinbox.MigrationFiles (what "watermill-inbox schema -format ... -out DIR" writes). Here
// goose and golang-migrate run in-process, as a service or a deploy step embeds them, on the
// fs.FS as it is.

// migrator is one tool's hold on a database and a migration folder.
type migrator interface {
	up() error   // apply every migration
	down() error // revert the last one
}

// migrationTool opens a migrator for a dialect on the database driver and dsn reach.
type migrationTool struct {
	name   string
	format sqlinbox.MigrationFormat
	open   func(t *testing.T, dialect sqlinbox.Dialect, driver, dsn string, fsys fs.FS) migrator
}

var migrationTools = []migrationTool{
	{"goose", sqlinbox.FormatGoose, openGoose},
	{"golang-migrate", sqlinbox.FormatGolangMigrate, openGolangMigrate},
}

// versionTable drops, when t ends, a tool's table of applied versions, named uniquely so that
// tests running at once keep apart.
func versionTable(t *testing.T, driver, dsn string) string {
	name := testenv.Name("versions")
	t.Cleanup(func() {
		db := openSQL(t, driver, dsn)
		_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+name)
	})
	return name
}

type gooseMigrator struct{ p *goose.Provider }

func openGoose(t *testing.T, dialect sqlinbox.Dialect, driver, dsn string, fsys fs.FS) migrator {
	t.Helper()
	gooseDialect := map[string]goose.Dialect{
		"postgres": goose.DialectPostgres, "mysql": goose.DialectMySQL, "sqlite": goose.DialectSQLite3,
	}[dialect.Name()]
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(gooseDialect, db, fsys, goose.WithTableName(versionTable(t, driver, dsn)))
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // closes db
	return gooseMigrator{p}
}

func (g gooseMigrator) up() error {
	_, err := g.p.Up(context.Background())
	return err
}

func (g gooseMigrator) down() error {
	_, err := g.p.Down(context.Background())
	return err
}

type golangMigrator struct{ m *migrate.Migrate }

// openGolangMigrate uses golang-migrate's drivers over a *sql.DB of our own (WithInstance):
// pgx v5 for PostgreSQL, go-sql-driver/mysql, and modernc.org/sqlite (its "sqlite" driver, no
// cgo).
func openGolangMigrate(t *testing.T, dialect sqlinbox.Dialect, driver, dsn string, fsys fs.FS) migrator {
	t.Helper()
	source, err := iofs.New(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	versions := versionTable(t, driver, dsn)
	var database migratedb.Driver
	switch dialect.Name() {
	case "postgres":
		database, err = migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: versions})
	case "mysql":
		database, err = migratemysql.WithInstance(db, &migratemysql.Config{MigrationsTable: versions})
	case "sqlite":
		database, err = migratesqlite.WithInstance(db, &migratesqlite.Config{MigrationsTable: versions})
	}
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", source, dialect.Name(), database)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() }) // closes db
	return golangMigrator{m}
}

func (g golangMigrator) up() error   { return g.m.Up() }
func (g golangMigrator) down() error { return g.m.Steps(-1) }

// migrationTarget is a database the tools migrate and the stores on it.
type migrationTarget struct {
	name string
	// stores build the backends whose stores run on the migrated table.
	stores map[string]newBackend
	// toolDSN returns what the tool opens, given a backend: its direct DSN, or a pooler's.
	toolDSN func(t *testing.T, b *backend, tool migrationTool) (driver, dsn string)
}

// The cases of the conformance suite that make the storm: copies at once, a thousand
// messages delivered 1-3 times by 16 workers, handler errors and failed commits redelivered.
var stormCases = []string{
	"concurrent copies of one message",
	"1000 messages delivered 1-3 times concurrently",
	"handler error releases the claim",
	"failed commit is a nack",
}

func directDSN(_ *testing.T, b *backend, _ migrationTool) (string, string) { return b.driver, b.dsn }

// On each database, each tool applies the migration of a table qualified by a schema that
// is not on PostgreSQL's search path (a database of its own on MariaDB; SQLite has no
// schemas): the stores on that table pass the storm of the conformance suite, exactly once
// (claim-first and write-behind mode, spread over the tools and stores), and their
// retention cleans it up; the tool migrates
// down, after which the table is gone (the store's check says it does not exist), and
// applies the migration again, after which a first delivery is claimed.
func TestMigrationToolsCreateTheTable(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		runMigrationTarget(t, migrationTarget{"postgres", map[string]newBackend{
			"pgx": pgxBackend, "database-sql": stdlibPostgresBackend,
		}, directDSN})
	})
	t.Run("postgres/pgbouncer", func(t *testing.T) {
		t.Parallel()
		// golang-migrate's PostgreSQL drivers hold a session-level advisory lock from
		// before the migration to after it, which a pooler in transaction mode keeps on no
		// one server connection: they migrate through a PgBouncer of one server connection,
		// where every statement meets the same session. goose keeps nothing between
		// transactions.
		bouncer := withQuery(t, testenv.PgBouncerURL(t, poolerServerConns), "default_query_exec_mode", "exec")
		oneConn := withQuery(t, testenv.PgBouncerURL(t, 1), "default_query_exec_mode", "exec")
		stores := poolerBackends(bouncer)
		runMigrationTarget(t, migrationTarget{"postgres", map[string]newBackend{
			"pgx": stores["pgx/exec"], "database-sql": stores["database-sql/exec"],
		}, func(_ *testing.T, _ *backend, tool migrationTool) (string, string) {
			if tool.format == sqlinbox.FormatGolangMigrate {
				return "pgx", oneConn
			}
			return "pgx", bouncer
		}})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		// A qualified table's migration creates its database first: two statements, which
		// golang-migrate's MySQL driver runs as one request, so its library needs
		// multiStatements (its command line sets it itself).
		runMigrationTarget(t, migrationTarget{"mariadb", map[string]newBackend{"database-sql": mysqlBackend},
			func(_ *testing.T, b *backend, tool migrationTool) (string, string) {
				if tool.format == sqlinbox.FormatGolangMigrate {
					return b.driver, withMySQLParams(b.dsn, "multiStatements=true")
				}
				return b.driver, b.dsn
			}})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		runMigrationTarget(t, migrationTarget{"sqlite", map[string]newBackend{"database-sql": sqliteBackend}, directDSN})
	})
}

func runMigrationTarget(t *testing.T, target migrationTarget) {
	names := []string{"pgx", "database-sql"}
	var stores []string
	backendsOf := map[string]*backend{}
	for _, name := range names {
		if newB, ok := target.stores[name]; ok {
			stores = append(stores, name)
			backendsOf[name] = newB(t)
		}
	}
	first := backendsOf[stores[0]]
	table := "billing_inbox"
	switch first.dialect.Name() {
	case (sqlinbox.Postgres{}).Name():
		table = createSchema(t, first, "DROP SCHEMA IF EXISTS %s CASCADE") + ".billing_inbox"
	case (sqlinbox.MySQL{}).Name():
		table = createSchema(t, first, "DROP DATABASE IF EXISTS %s") + ".billing_inbox"
	}

	for i, tool := range migrationTools {
		t.Run(tool.name, func(t *testing.T) {
			// The default version: the time now in UTC, as the tools' create commands number.
			fsys, err := sqlinbox.MigrationFiles(first.dialect, table, tool.format, "")
			if err != nil {
				t.Fatal(err)
			}
			driver, dsn := target.toolDSN(t, first, tool)
			m := tool.open(t, first.dialect, driver, dsn, fsys)
			if err := m.up(); err != nil {
				t.Fatalf("%s up: %v", tool.name, err)
			}
			// A table the stores refuse would fail every delivery of the storm for a minute.
			if err := checkTable(t, first, table); err != nil {
				t.Fatalf("after %s up: CheckTable = %v, want nil", tool.name, err)
			}
			for j, name := range stores {
				b := backendsOf[name]
				writeBehind := (i+j)%2 == 1
				t.Run(fmt.Sprintf("%s/writeBehind=%v", name, writeBehind), func(t *testing.T) {
					inboxtest.Run(t, migratedHarness(b, table), &inboxtest.Options{
						Config: inbox.Config{WriteBehind: writeBehind}, Cases: stormCases,
					})
					cleanupEverything(t, b, table)
				})
			}

			if err := m.down(); err != nil {
				t.Fatalf("%s down: %v", tool.name, err)
			}
			if err := checkTable(t, first, table); !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), "it does not exist") {
				t.Fatalf("after %s down: CheckTable = %v, want ErrTableMismatch: it does not exist", tool.name, err)
			}

			if err := m.up(); err != nil {
				t.Fatalf("%s up again: %v", tool.name, err)
			}
			t.Cleanup(func() { _ = m.down() })
			inboxtest.Run(t, migratedHarness(first, table), &inboxtest.Options{
				Cases: []string{"first delivery commits claim and business row together"},
			})
		})
	}
}

// cleanupEverything runs a retention pass of b's store on table that deletes every claim
// the storm left (older than a microsecond), in batches of one, and checks that it did.
func cleanupEverything(t *testing.T, b *backend, table string) {
	t.Helper()
	left := b.rows(t, table, "")
	if left == 0 {
		t.Fatal("the storm left no claim to clean up")
	}
	store, err := b.newStore(sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := store.(sqlinbox.Cleaner).Cleanup(context.Background(), time.Microsecond, sqlinbox.CleanupConfig{BatchSize: 1})
	if err != nil || deleted != int64(left) {
		t.Errorf("Cleanup: deleted %d, %v; want the %d claims", deleted, err, left)
	}
	wantRows(t, "claims after the cleanup", b.rows(t, table, ""), 0)
}

// checkTable returns the table check's verdict on table, by a new store of b.
func checkTable(t *testing.T, b *backend, table string) error {
	t.Helper()
	store, err := b.newStore(sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return store.(interface{ CheckTable(context.Context) error }).CheckTable(context.Background())
}

// createSchema creates a schema (a database on MariaDB) of a new name, dropped with
// everything in it by drop when t ends, and returns its name.
func createSchema(t *testing.T, b *backend, drop string) string {
	t.Helper()
	schema := testenv.Name("app")
	mustExec(t, b.direct, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(context.Background()), fmt.Sprintf(drop, schema)) })
	return schema
}

// migratedHarness is b's harness on the migrated table instead of b's own: each case gets a
// new store on it, with the table and the business table emptied.
func migratedHarness(b *backend, table string) func(t *testing.T) *inboxtest.Harness {
	return func(t *testing.T) *inboxtest.Harness {
		t.Helper()
		mustExec(t, b.direct, "DELETE FROM "+table)
		mustExec(t, b.direct, "DELETE FROM "+b.business)
		store, err := b.newStore(sqlinbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		h := b.harness()
		h.Store, h.Table = store, table
		return h
	}
}

package sqlinbox_test

import (
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// readMigrations returns the files of fsys by name.
func readMigrations(t *testing.T, fsys fs.FS) map[string]string {
	t.Helper()
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return files
}

// Each format lays out the files its tool reads, the up statements exactly SchemaSQL's, the
// down statement the DROP of the table; the fs.FS passes the standard library's checks.
func TestMigrationFiles(t *testing.T) {
	for _, tt := range []struct {
		dialect sqlinbox.Dialect
		table   string
		drop    string
	}{
		{sqlinbox.Postgres{}, "app.billing_inbox", `DROP TABLE IF EXISTS "app"."billing_inbox";` + "\n"},
		{sqlinbox.MySQL{}, "test.billing_inbox", "DROP TABLE IF EXISTS `test`.`billing_inbox`;\n"},
		{sqlinbox.SQLite{}, "billing_inbox", `DROP TABLE IF EXISTS "billing_inbox";` + "\n"},
	} {
		t.Run(tt.dialect.Name(), func(t *testing.T) {
			up, err := sqlinbox.SchemaSQL(tt.dialect, tt.table)
			if err != nil {
				t.Fatal(err)
			}
			name := "00042_create_" + tt.table
			// goose's file holds the DDL with PostgreSQL's blocks (the schema's, the index of
			// the unpublished records), which have ";" of their own, between StatementBegin and
			// StatementEnd.
			gooseUp := regexp.MustCompile(`(?s)(DO \$\$.*?END \$\$;\n)`).ReplaceAllString(up, "-- +goose StatementBegin\n$1-- +goose StatementEnd\n")
			for _, f := range []struct {
				format sqlinbox.MigrationFormat
				want   map[string]string
			}{
				{sqlinbox.FormatGoose, map[string]string{
					name + ".sql": "-- +goose Up\n" + gooseUp + "\n-- +goose Down\n" + tt.drop,
				}},
				{sqlinbox.FormatGolangMigrate, map[string]string{name + ".up.sql": up, name + ".down.sql": tt.drop}},
				{sqlinbox.FormatSQL, map[string]string{name + ".sql": up}},
			} {
				fsys, err := sqlinbox.MigrationFiles(tt.dialect, tt.table, f.format, "00042")
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for n := range f.want {
					names = append(names, n)
				}
				if err := fstest.TestFS(fsys, names...); err != nil {
					t.Errorf("%s: %v", f.format, err)
				}
				got := readMigrations(t, fsys)
				if len(got) != len(f.want) {
					t.Errorf("%s: files %v, want %v", f.format, got, f.want)
				}
				for n, want := range f.want {
					if got[n] != want {
						t.Errorf("%s: %s is\n%s\nwant\n%s", f.format, n, got[n], want)
					}
				}
			}
		})
	}
}

// goose ends a statement at a line that ends with ";": a statement holding one of its own
// goes between StatementBegin and StatementEnd, the others do not.
func TestMigrationFilesGooseStatementBlocks(t *testing.T) {
	fsys, err := sqlinbox.MigrationFiles(withFunction{}, "inbox", sqlinbox.FormatGoose, "1")
	if err != nil {
		t.Fatal(err)
	}
	want := `-- +goose Up
CREATE TABLE "inbox" (consumer text);
-- +goose StatementBegin
CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$ LANGUAGE plpgsql;
-- +goose StatementEnd

-- +goose Down
DROP TABLE IF EXISTS "inbox";
`
	if got := readMigrations(t, fsys)["1_create_inbox.sql"]; got != want {
		t.Errorf("goose file:\n%s\nwant\n%s", got, want)
	}
}

// withFunction is PostgreSQL whose table comes with a function holding a ";".
type withFunction struct{ sqlinbox.Postgres }

func (withFunction) CreateTable(t sqlinbox.Table) []string {
	return []string{"CREATE TABLE " + t.Quoted + " (consumer text)",
		"CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$ LANGUAGE plpgsql"}
}

// Without a version the files are numbered with the time in UTC, as goose create numbers
// them; a bad version, format or table is an error, and so is a schema on SQLite.
func TestMigrationFilesVersionAndBadInput(t *testing.T) {
	before := time.Now().UTC().Truncate(time.Second)
	fsys, err := sqlinbox.MigrationFiles(sqlinbox.Postgres{}, "inbox", sqlinbox.FormatGolangMigrate, "")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UTC()
	for name := range readMigrations(t, fsys) {
		m := regexp.MustCompile(`^(\d{14})_create_inbox\.(up|down)\.sql$`).FindStringSubmatch(name)
		if m == nil {
			t.Fatalf("file %q, want 20060102150405_create_inbox.up.sql or .down.sql", name)
		}
		at, err := time.Parse("20060102150405", m[1])
		if err != nil || at.Before(before) || at.After(after) {
			t.Errorf("version %s is not the time of the call in UTC (%s to %s)", m[1], before, after)
		}
	}

	for _, version := range []string{"0", "000", "-1", "+5", "1e3", "v1", "12 ", "12345678901234567890"} {
		if _, err := sqlinbox.MigrationFiles(sqlinbox.Postgres{}, "inbox", sqlinbox.FormatGoose, version); err == nil ||
			!strings.Contains(err.Error(), "migration version") {
			t.Errorf("version %q: err = %v, want one about the version", version, err)
		}
	}
	if _, err := sqlinbox.MigrationFiles(sqlinbox.Postgres{}, "inbox", "flyway", "1"); err == nil ||
		!strings.Contains(err.Error(), `unknown migration format "flyway"`) {
		t.Errorf("unknown format: err = %v", err)
	}
	for _, tt := range []struct {
		dialect sqlinbox.Dialect
		table   string
	}{
		{sqlinbox.Postgres{}, "inbox; DROP TABLE users"},
		{sqlinbox.MySQL{}, "a.b.c"},
		{sqlinbox.SQLite{}, "app.billing_inbox"},
	} {
		if _, err := sqlinbox.MigrationFiles(tt.dialect, tt.table, sqlinbox.FormatGoose, "1"); !errors.Is(err, sqlinbox.ErrInvalidTableName) {
			t.Errorf("%s table %q: err = %v, want ErrInvalidTableName", tt.dialect.Name(), tt.table, err)
		}
	}
}

// The upgrade is laid out as the first migration is, named after the table and the upgrade;
// a dialect that cannot upgrade safely (SQLite) has none.
func TestUpgradeFiles(t *testing.T) {
	fsys, err := sqlinbox.UpgradeFiles(sqlinbox.MySQL{}, "inbox", sqlinbox.FormatGolangMigrate, "00043")
	if err != nil {
		t.Fatal(err)
	}
	files := readMigrations(t, fsys)
	up, down := files["00043_upgrade_inbox_utc_processed_at_unpublished.up.sql"], files["00043_upgrade_inbox_utc_processed_at_unpublished.down.sql"]
	if len(files) != 2 || !strings.HasPrefix(up, "LOCK TABLES `inbox` WRITE;\n") || !strings.HasSuffix(down, "UNLOCK TABLES;\n") ||
		!strings.Contains(up, "SET DEFAULT (UTC_TIMESTAMP(6))") || !strings.Contains(down, "SET DEFAULT CURRENT_TIMESTAMP(6)") ||
		!strings.Contains(up, "ADD COLUMN unpublished") || !strings.Contains(down, "DROP COLUMN unpublished") {
		t.Errorf("upgrade files: %v", files)
	}
	fsys, err = sqlinbox.UpgradeFiles(sqlinbox.Postgres{}, "app.inbox", sqlinbox.FormatGoose, "7")
	if err != nil {
		t.Fatal(err)
	}
	files = readMigrations(t, fsys)
	if goose := files["7_upgrade_app.inbox_unpublished.sql"]; len(files) != 1 || !strings.Contains(goose, `ADD COLUMN IF NOT EXISTS unpublished`) ||
		!strings.Contains(goose, `DROP INDEX IF EXISTS "app"."inbox_unpublished"`) {
		t.Errorf("postgres upgrade files: %v", files)
	}
	if _, err := sqlinbox.UpgradeFiles(sqlinbox.SQLite{}, "inbox", sqlinbox.FormatGoose, "1"); err == nil || !strings.Contains(err.Error(), "there is no upgrade") {
		t.Errorf("sqlite: err = %v, want no upgrade", err)
	}
}

package sqlinbox_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// What a migration needs to run on a database where nothing exists yet, and what keeps two
// tables' migrations and indexes apart.

// SQLite refuses every qualified name, main's too: another schema is an attached database,
// and main.x is x spelled another way, which would give the table two names in the team's
// migrations and the CLI's commands.
func TestSQLiteRefusesEveryQualifiedName(t *testing.T) {
	for _, name := range []string{"main.inbox", "temp.inbox", "app.billing_inbox"} {
		if _, err := (sqlinbox.SQLite{}).ParseTable(name); !errors.Is(err, sqlinbox.ErrInvalidTableName) || !strings.Contains(err.Error(), "SQLite has no schemas") {
			t.Errorf("ParseTable(%q) = %v, want ErrInvalidTableName: SQLite has no schemas", name, err)
		}
	}
}

// indexOf returns the name of the processed_at index that dialect's DDL of table creates.
func indexOf(t *testing.T, dialect sqlinbox.Dialect, table string) string {
	t.Helper()
	ddl, err := sqlinbox.SchemaSQL(dialect, table)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`CREATE INDEX IF NOT EXISTS "([^"]+)"`).FindStringSubmatch(ddl)
	if m == nil {
		t.Fatalf("no CREATE INDEX in %s", ddl)
	}
	return m[1]
}

// The processed_at index is never named as its table (then CREATE INDEX IF NOT EXISTS finds
// the table and creates nothing), at most 63 bytes, the same as before for a name that fits
// with its suffix, and apart for two long names that share the first 50 bytes.
func TestIndexNameIsNeverTheTables(t *testing.T) {
	for _, dialect := range []sqlinbox.Dialect{sqlinbox.Postgres{}, sqlinbox.SQLite{}} {
		seen := map[string]string{}
		for n := 1; n <= 63; n++ {
			for _, last := range []string{"a", "b"} {
				table := strings.Repeat("t", n-1) + last
				index := indexOf(t, dialect, table)
				if index == table || len(index) > 63 {
					t.Errorf("%s: table %q (%d bytes): index %q", dialect.Name(), table, n, index)
				}
				if n+len("_processed_at") <= 63 && index != table+"_processed_at" {
					t.Errorf("%s: table %q: index %q, want %q as before", dialect.Name(), table, index, table+"_processed_at")
				}
				if other, ok := seen[index]; ok {
					t.Errorf("%s: tables %q and %q share index %q", dialect.Name(), other, table, index)
				}
				seen[index] = table
			}
		}
	}
}

// Two tables whose names differ only where the schema ends get migrations of two names.
func TestMigrationNamesDifferPerTable(t *testing.T) {
	names := map[string]string{}
	for _, table := range []string{"app.billing_inbox", "app_billing.inbox", "app_billing_inbox"} {
		fsys, err := sqlinbox.MigrationFiles(sqlinbox.Postgres{}, table, sqlinbox.FormatGoose, "1")
		if err != nil {
			t.Fatal(err)
		}
		for name := range readMigrations(t, fsys) {
			if other, ok := names[name]; ok {
				t.Errorf("tables %q and %q both give %s", other, table, name)
			}
			names[name] = table
		}
	}
}

// A qualified table's DDL creates its schema (a database on MySQL) first, if it does not
// exist; the down migration drops the table alone, as other tables may share the schema.
func TestQualifiedTableCreatesItsSchema(t *testing.T) {
	for _, tt := range []struct {
		dialect sqlinbox.Dialect
		schema  string
	}{
		{sqlinbox.Postgres{}, `CREATE SCHEMA "app"`},
		{sqlinbox.MySQL{}, "CREATE DATABASE IF NOT EXISTS `app`"},
	} {
		fsys, err := sqlinbox.MigrationFiles(tt.dialect, "app.billing_inbox", sqlinbox.FormatGolangMigrate, "1")
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range readMigrations(t, fsys) {
			up := strings.HasSuffix(name, ".up.sql")
			if creates := strings.Contains(content, tt.schema); creates != up {
				t.Errorf("%s: %s creates the schema: %v, want %v:\n%s", tt.dialect.Name(), name, creates, up, content)
			}
			if !up && strings.Contains(strings.ToUpper(content), "DROP SCHEMA") || strings.Contains(strings.ToUpper(content), "DROP DATABASE") {
				t.Errorf("%s: %s drops the schema:\n%s", tt.dialect.Name(), name, content)
			}
		}
		ddl, err := sqlinbox.SchemaSQL(tt.dialect, "billing_inbox")
		if err != nil || strings.Contains(ddl, "SCHEMA") || strings.Contains(ddl, "DATABASE") {
			t.Errorf("%s: an unqualified table's DDL: %v\n%s", tt.dialect.Name(), err, ddl)
		}
	}
}

package inboxcli_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/cmd/watermill-inbox/inboxcli"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// cockroachish is a dialect written outside the library and outside the command: PostgreSQL's
// SQL under a name of its own, reached by a DSN scheme of its own.
type cockroachish struct{ sqlinbox.Postgres }

func (cockroachish) Name() string { return "cockroachish" }

func cockroachishCLI() inboxcli.Dialect {
	return inboxcli.Dialect{
		Dialect: cockroachish{},
		Names:   []string{"crdb"},
		Open: func(dsn string, _ bool) (*sql.DB, error) {
			return sql.Open("pgx", strings.Replace(dsn, "crdb://", "postgres://", 1)+"&default_query_exec_mode=exec")
		},
		Hint: func(error) string { return "a hint of the dialect's own" },
	}
}

// runWith runs the command as a program of one's own builds it: the shipped dialects and one more.
func runWith(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := inboxcli.Main(context.Background(), args, &stdout, &stderr,
		inboxcli.Postgres(), inboxcli.MySQL(), inboxcli.SQLite(), cockroachishCLI())
	return code, stdout.String(), stderr.String()
}

// A dialect defined outside package inboxcli runs the command's schema, migrate, check and stats
// through Main, by its -dialect names and its DSN scheme, with no change to the command: the
// table check's refusal names the command that writes the migration with that dialect's name,
// and that command works; a failure carries the dialect's hint.
func TestADialectFromOutsideRunsTheCommands(t *testing.T) {
	u := testenv.PostgresURL(t)
	dsn := "crdb://" + strings.TrimPrefix(strings.TrimPrefix(u, "postgres://"), "postgresql://")
	if !strings.Contains(dsn, "?") {
		dsn += "?sslmode=disable"
	}
	table := testenv.Name("ext_inbox")
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
		db.Close()
	})

	code, stdout, stderr := runWith(t, "schema", "-dialect", "cockroachish", "-table", table)
	want, err := sqlinbox.SchemaSQL(cockroachish{}, table)
	if err != nil || code != 0 || stdout != want {
		t.Fatalf("schema -dialect cockroachish: exit %d, stdout %q, stderr %q; want the dialect's DDL %q (%v)", code, stdout, stderr, want, err)
	}

	code, _, stderr = runWith(t, "check", "-dsn", dsn, "-table", table)
	command := regexp.MustCompile(`"watermill-inbox (schema [^"]+)"`).FindStringSubmatch(stderr)
	if code != 1 || command == nil || !strings.Contains(command[1], "-dialect cockroachish") ||
		!strings.HasSuffix(strings.TrimSpace(stderr), "(a hint of the dialect's own)") {
		t.Fatalf("check of a missing table: exit %d, stderr %q; want 1, the migration's command with -dialect cockroachish, and the hint", code, stderr)
	}
	dir := t.TempDir()
	args := strings.Fields(strings.Replace(command[1], "-out DIR", "-out "+dir, 1))
	if code, _, stderr := runWith(t, args...); code != 0 {
		t.Fatalf("the command the refusal names, %q: exit %d, %s", args, code, stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*_create_"+table+".sql")); len(files) != 1 {
		entries, _ := os.ReadDir(dir)
		t.Errorf("it wrote %v, want the goose migration of %s", entries, table)
	}

	for _, args := range [][]string{
		{"migrate", "-dsn", dsn, "-table", table},
		{"check", "-dsn", dsn, "-table", table},
		{"check", "-dialect", "crdb", "-dsn", dsn, "-table", table},
	} {
		if code, stdout, stderr := runWith(t, args...); code != 0 || !strings.Contains(stdout, "can guard against duplicates") || !strings.Contains(stdout, "(cockroachish)") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, err := db.ExecContext(context.Background(), "INSERT INTO "+table+" (consumer, message_id) VALUES ('billing', 'k1'), ('billing', 'k2')"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runWith(t, "stats", "-dsn", dsn, "-table", table)
	for _, want := range []string{`(?m)^table\s+` + table + ` \(cockroachish\)$`, `(?m)^guards\s+yes$`, `(?m)^claims\s+2$`, `(?m)^billing\s+2\s`} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("stats: exit %d, stderr %q, stdout does not match %s:\n%s", code, stderr, want, stdout)
		}
	}
}

// Main refuses dialects it cannot tell apart, or cannot open, before it runs a command.
func TestMainRefusesBadDialects(t *testing.T) {
	for _, tt := range []struct {
		name     string
		dialects []inboxcli.Dialect
		want     string
	}{
		{"none", nil, "no dialect"},
		{"no Open", []inboxcli.Dialect{{Dialect: sqlinbox.Postgres{}}}, "Dialect and Open are required"},
		{"a name twice", []inboxcli.Dialect{inboxcli.Postgres(), {Dialect: cockroachish{}, Names: []string{"postgresql"},
			Open: func(string, bool) (*sql.DB, error) { return nil, nil }}}, `name "postgresql" is empty or another dialect's`},
		{"a nil dialect embedded", []inboxcli.Dialect{inboxcli.Postgres(), {Dialect: embedsNil{}, Names: []string{"broken"},
			Open: func(string, bool) (*sql.DB, error) { return nil, nil }}}, "dialect 2 of Main: sqlinbox: dialect inboxcli_test.embedsNil has no dialect inside"},
	} {
		var stdout, stderr bytes.Buffer
		code := inboxcli.Main(context.Background(), []string{"schema", "-dialect", "postgres"}, &stdout, &stderr, tt.dialects...)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", tt.name, code, stdout.String(), stderr.String(), tt.want)
		}
	}
}

// embedsNil embeds the interface and leaves it nil: every method it does not write panics.
type embedsNil struct{ sqlinbox.Dialect }

// A -dialect of one's own selects it with a postgres:// DSN beside the shipped PostgreSQL
// dialect (the DSN goes to its Open as it is); a shipped dialect named with another shipped
// one's scheme is still refused as a mistake.
func TestDialectOfOnesOwnTakesAnotherSchemesDSN(t *testing.T) {
	code, stdout, stderr := runWith(t, "schema", "-dialect", "crdb", "-dsn", "postgres://db/app", "-table", "billing_inbox")
	want, err := sqlinbox.SchemaSQL(cockroachish{}, "billing_inbox")
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("schema -dialect crdb -dsn postgres://: exit %d, stderr %q, stdout %q; want 0 and the dialect's DDL", code, stderr, stdout)
	}
	if code, _, stderr := runWith(t, "schema", "-dialect", "mysql", "-dsn", "postgres://db/app"); code != 2 || !strings.Contains(stderr, "does not match") {
		t.Errorf("schema -dialect mysql -dsn postgres://: exit %d, stderr %q; want 2 and the mismatch", code, stderr)
	}
}

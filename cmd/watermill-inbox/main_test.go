package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// cli runs the command line and returns its exit status and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// wantError checks a failure: exit status code and one line on stderr containing substr.
func wantError(t *testing.T, args []string, code int, substr string) {
	t.Helper()
	got, stdout, stderr := cli(t, args...)
	if got != code {
		t.Errorf("%q: exit %d, want %d (stderr %q)", args, got, code, stderr)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "watermill-inbox: ") {
		t.Errorf("%q: stderr %q, want one line starting with \"watermill-inbox: \"", args, stderr)
	}
	if !strings.Contains(stderr, substr) {
		t.Errorf("%q: stderr %q, want it to mention %q", args, stderr, substr)
	}
	if stdout != "" {
		t.Errorf("%q: stdout %q, want nothing", args, stdout)
	}
}

func TestSchemaPrintsTheLibrarysDDL(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		dialect sqlinbox.Dialect
		table   string
	}{
		{[]string{"-dialect", "postgres"}, sqlinbox.Postgres, "inbox"},
		{[]string{"-dialect", "mysql", "-table", "billing.inbox"}, sqlinbox.MySQL, "billing.inbox"},
		{[]string{"-dialect", "sqlite", "-table", "Inbox_2"}, sqlinbox.SQLite, "Inbox_2"},
		// The dialect from the DSN's scheme; schema does not connect.
		{[]string{"-dsn", "postgresql://nobody@127.0.0.1:1/none"}, sqlinbox.Postgres, "inbox"},
		{[]string{"-dsn", "mysql://nobody@tcp(127.0.0.1:1)/none"}, sqlinbox.MySQL, "inbox"},
		{[]string{"-dsn", "file:/nonexistent/inbox.db"}, sqlinbox.SQLite, "inbox"},
	} {
		code, stdout, stderr := cli(t, append([]string{"schema"}, tt.args...)...)
		want, err := sqlinbox.SchemaSQL(tt.dialect, tt.table)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("schema %q: exit %d, stdout\n%s\nstderr %q; want 0 and\n%s", tt.args, code, stdout, stderr, want)
		}
	}
}

func TestDSNFromTheEnvironment(t *testing.T) {
	t.Setenv(dsnVar, "mysql://nobody@tcp(127.0.0.1:1)/none")
	code, stdout, _ := cli(t, "schema")
	if want, _ := sqlinbox.SchemaSQL(sqlinbox.MySQL, "inbox"); code != 0 || stdout != want {
		t.Errorf("schema with %s: exit %d, stdout %q", dsnVar, code, stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv(dsnVar, "")
	sqlite := "sqlite://" + filepath.Join(t.TempDir(), "inbox.db")
	for _, tt := range []struct {
		args   []string
		substr string
	}{
		{nil, "no command"},
		{[]string{"vacuum"}, `unknown command "vacuum"`},
		{[]string{"schema"}, "no database"},
		{[]string{"schema", "-dialect", "oracle"}, `unknown dialect "oracle"`},
		{[]string{"stats", "-dsn", "oracle://db", "-dialect", "oracle"}, `unknown dialect "oracle"`},
		{[]string{"schema", "-dialect", "mysql", "-dsn", "postgres://x/y"}, "does not match"},
		{[]string{"schema", "-dialect", "postgres", "-table", "inbox; DROP TABLE x"}, "invalid table name"},
		{[]string{"schema", "-x"}, "flag provided but not defined: -x"},
		{[]string{"schema", "-dialect", "postgres", "extra"}, `unexpected argument "extra"`},
		{[]string{"migrate", "-dsn", "host=127.0.0.1 dbname=test"}, "cannot tell the dialect"},
		{[]string{"stats"}, "no database"},
		{[]string{"cleanup", "-dsn", sqlite}, "-older-than is required"},
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "0s"}, `bad -older-than "0s"`},
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "soon"}, `bad -older-than "soon"`},
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "-3d"}, `bad -older-than "-3d"`},
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "3d", "-batch-size", "0"}, "-batch-size must be positive"},
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "3d", "-progress", "fancy"}, `-progress "fancy"`},
	} {
		wantError(t, tt.args, exitUsage, tt.substr)
	}
}

func TestBadDSN(t *testing.T) {
	// Skip (or fail) like the database tests when the servers are not there, so "refused"
	// below is the port's doing, not a missing server's.
	testenv.PostgresURL(t)
	testenv.MySQLDSN(t)
	for _, tt := range []struct {
		dsn, substr string
	}{
		{"postgres://postgres@127.0.0.1:1/test?connect_timeout=5", "connect to the postgres database"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=bogus", "postgres"},
		{"mysql://not a dsn", "bad MySQL DSN"},
		{"mysql://root@tcp(127.0.0.1:1)/test", "connect to the mysql database"},
		{"sqlite://" + filepath.Join(t.TempDir(), "no", "such", "dir", "inbox.db"), "connect to the sqlite database"},
	} {
		for _, command := range [][]string{{"migrate"}, {"stats"}, {"cleanup", "-older-than", "1d"}} {
			wantError(t, append(command, "-dsn", tt.dsn), exitFail, tt.substr)
		}
	}
}

// database is one server (or file) the commands run against.
type database struct {
	name, dsn string
	// age and now are SQL expressions for a processed_at two hours ago and now.
	age, now string
}

func databases(t *testing.T) []database {
	return []database{
		{"postgres", testenv.PostgresURL(t), "now() - interval '2 hours'", "now()"},
		{"mariadb", "mysql://" + testenv.MySQLDSN(t), "NOW(6) - INTERVAL 2 HOUR", "NOW(6)"},
		{"sqlite", "sqlite://" + filepath.Join(t.TempDir(), "inbox.db"), "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours')",
			"strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"},
	}
}

// open connects to d as the command would, for the test's own SQL.
func (d database) open(t *testing.T) (*sql.DB, sqlinbox.Dialect) {
	t.Helper()
	dialect, driver, dsn, err := (&target{dsn: d.dsn, table: "inbox"}).resolve(true)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dialect
}

// insert adds n claims of consumer, with processed_at set by the expression age.
func insert(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, table, consumer string, n int, age string) {
	t.Helper()
	var values []string
	var args []any
	for i := range n {
		p1, p2 := "?", "?"
		if dialect.Name == sqlinbox.Postgres.Name {
			p1, p2 = fmt.Sprintf("$%d", 2*i+1), fmt.Sprintf("$%d", 2*i+2)
		}
		values = append(values, "("+p1+", "+p2+", "+age+")")
		args = append(args, consumer, fmt.Sprintf("%s-%d", consumer, i))
	}
	_, err := db.ExecContext(context.Background(), "INSERT INTO "+table+" (consumer, message_id, processed_at) VALUES "+
		strings.Join(values, ", "), args...)
	if err != nil {
		t.Fatal(err)
	}
}

// Against each database: migrate creates the table (twice is fine), stats and cleanup fail
// clearly before it exists, cleanup deletes exactly the expired claims with a bar or a
// summary line, and stats reports what is left.
func TestCommandsAgainstDatabases(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, dialect := d.open(t)
			table := testenv.Name("cli_inbox")
			t.Cleanup(func() {
				_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
			})
			common := []string{"-dsn", d.dsn, "-table", table}

			wantError(t, append([]string{"stats"}, common...), exitFail, fmt.Sprintf("inbox table %q is missing", table))
			wantError(t, append([]string{"cleanup", "-older-than", "1h"}, common...), exitFail, "watermill-inbox migrate")

			for range 2 {
				code, stdout, stderr := cli(t, append([]string{"migrate"}, common...)...)
				if code != 0 || stderr != "" || !strings.Contains(stdout, "are in place") {
					t.Fatalf("migrate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
				}
			}
			insert(t, db, dialect, table, "billing", 250, d.age)
			insert(t, db, dialect, table, "gone_consumer", 40, d.age)
			insert(t, db, dialect, table, "billing_new", 10, d.now)

			code, stdout, stderr := cli(t, append([]string{"stats"}, common...)...)
			if code != 0 || stderr != "" {
				t.Fatalf("stats: exit %d, stderr %q", code, stderr)
			}
			for _, want := range []string{
				`(?m)^claims\s+300$`, `(?m)^consumers\s+3$`, `(?m)^size\s+\d+(\.\d)? [KMG]?i?B \(\d+ bytes`,
				`(?m)^oldest claim\s+20\d\d-`, `(?m)^billing\s+250\s+20`, `(?m)^billing_new\s+10\s+20`, `(?m)^gone_consumer\s+40\s+`,
			} {
				if !regexp.MustCompile(want).MatchString(stdout) {
					t.Errorf("stats output does not match %s:\n%s", want, stdout)
				}
			}

			// Not a terminal: one summary line.
			code, stdout, stderr = cli(t, append([]string{"cleanup", "-older-than", "1h", "-batch-size", "100"}, common...)...)
			wantLine := fmt.Sprintf("deleted 290 claims older than 1h0m0s from %q in 3 batches", table)
			if code != 0 || stderr != "" || strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, wantLine) {
				t.Errorf("cleanup: exit %d, stdout %q, stderr %q; want one line starting %q", code, stdout, stderr, wantLine)
			}
			code, stdout, _ = cli(t, append([]string{"stats"}, common...)...)
			if code != 0 || !regexp.MustCompile(`(?m)^claims\s+10$`).MatchString(stdout) || strings.Contains(stdout, "gone_consumer") {
				t.Errorf("stats after cleanup: exit %d, want 10 claims left, none of gone_consumer:\n%s", code, stdout)
			}

			// With the bar: redrawn lines up to 100%, then the summary.
			insert(t, db, dialect, table, "replayed", 150, d.age)
			code, stdout, stderr = cli(t, append([]string{"cleanup", "-older-than", "1h", "-batch-size", "100", "-progress", "bar"}, common...)...)
			if code != 0 || stderr != "" {
				t.Fatalf("cleanup with bar: exit %d, stderr %q", code, stderr)
			}
			for _, want := range []string{"\r[", "100/150 rows", "\r[" + strings.Repeat("#", 30) + "] 100% 150/150 rows", "\ndeleted 150 claims"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("cleanup with bar: stdout %q, want it to contain %q", stdout, want)
				}
			}
		})
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]string{"14d": "336h0m0s", "90m": "1h30m0s", "1d": "24h0m0s"} {
		got, err := parseAge(in)
		if err != nil || got.String() != want {
			t.Errorf("parseAge(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
}

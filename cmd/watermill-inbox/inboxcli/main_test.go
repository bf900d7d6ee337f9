package inboxcli

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// runCLI runs the command line and returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut, Postgres(), MySQL(), SQLite())
	return code, out.String(), errOut.String()
}

// wantError checks a failure: exit status code and one line on stderr containing substr.
func wantError(t *testing.T, args []string, code int, substr string) {
	t.Helper()
	got, stdout, stderr := runCLI(t, args...)
	if got != code {
		t.Errorf("%q: exit %d, want %d (stderr %q)", args, got, code, stderr)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "watermill-inbox: ") ||
		strings.HasPrefix(stderr, "watermill-inbox: watermill-inbox") {
		t.Errorf("%q: stderr %q, want one line starting with \"watermill-inbox: \" once", args, stderr)
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
		{[]string{"-dialect", "postgres"}, sqlinbox.Postgres{}, "inbox"},
		{[]string{"-dialect", "mysql", "-table", "billing.inbox"}, sqlinbox.MySQL{}, "billing.inbox"},
		{[]string{"-dialect", "sqlite", "-table", "Inbox_2"}, sqlinbox.SQLite{}, "Inbox_2"},
		// The dialect from the DSN's scheme; schema does not connect.
		{[]string{"-dsn", "postgresql://nobody@127.0.0.1:1/none"}, sqlinbox.Postgres{}, "inbox"},
		{[]string{"-dsn", "mysql://nobody@tcp(127.0.0.1:1)/none"}, sqlinbox.MySQL{}, "inbox"},
		{[]string{"-dsn", "file:/nonexistent/inbox.db"}, sqlinbox.SQLite{}, "inbox"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"schema"}, tt.args...)...)
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
	code, stdout, _ := runCLI(t, "schema")
	if want, _ := sqlinbox.SchemaSQL(sqlinbox.MySQL{}, "inbox"); code != 0 || stdout != want {
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
		{[]string{"cleanup", "-dsn", sqlite, "-older-than", "3d", "-progress-every", "-1s"}, "-progress-every must not be negative"},
		{[]string{"stats", "-dialect", "postgres", "extra"}, `stats: unexpected argument "extra"`},
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
		code        int // a malformed DSN is bad usage; one that does not connect, a failure
	}{
		{"postgres://postgres@127.0.0.1:1/test?connect_timeout=5", "connect to the postgres database", exitFail},
		{"postgres://postgres@localhost:1/test?connect_timeout=5", "connect to the postgres database", exitFail},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=bogus", "bad PostgreSQL DSN", exitUsage},
		{"postgres://[::1", "bad PostgreSQL DSN", exitUsage},
		{"mysql://not a dsn", "bad MySQL DSN", exitUsage},
		{"mysql://root@tcp(127.0.0.1:1)/test", "connect to the mysql database", exitFail},
	} {
		for _, command := range [][]string{{"migrate"}, {"stats"}, {"cleanup", "-older-than", "1d"}} {
			args := append(command, "-dsn", tt.dsn)
			wantError(t, args, tt.code, tt.substr)
			// pgx lists each connection attempt (TLS, then plain text) with the same error.
			if _, _, stderr := runCLI(t, args...); strings.Count(stderr, "refused") > 1 {
				t.Errorf("%q: the error is repeated: %s", args, stderr)
			}
		}
	}
}

// A SQLite file that does not exist is an error for the commands that only read or delete
// (SQLite would create an empty database on open); migrate creates it.
func TestMissingSQLiteFile(t *testing.T) {
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "typo.db"),
		"file:" + filepath.Join(dir, "typo.db") + "?_pragma=journal_mode(WAL)",
	} {
		for _, command := range [][]string{{"stats"}, {"cleanup", "-older-than", "1d"}} {
			wantError(t, append(command, "-dsn", dsn), exitFail, "typo.db does not exist (create it with \"watermill-inbox migrate\")")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "typo.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stats and cleanup created the missing file: %v", err)
	}
	wantError(t, []string{"migrate", "-dsn", "sqlite://" + filepath.Join(dir, "no", "such", "dir", "inbox.db")},
		exitFail, "connect to the sqlite database")

	created := "sqlite://" + filepath.Join(dir, "new.db")
	if code, stdout, stderr := runCLI(t, "migrate", "-dsn", created); code != exitOK || !strings.Contains(stdout, "are in place") {
		t.Fatalf("migrate of a new file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, "stats", "-dsn", created); code != exitOK {
		t.Errorf("stats after migrate: exit %d, stderr %q", code, stderr)
	}
}

// The exit statuses the package documentation lists: 0 done (also -h), 1 failed, 2 bad
// usage, 3 another cleanup holds the lock (TestCommandsAgainstDatabases).
func TestExitStatuses(t *testing.T) {
	t.Setenv(dsnVar, "")
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "inbox.db")
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"help"}, exitOK},
		{[]string{"schema", "-h"}, exitOK},
		{[]string{"schema", "-dialect", "sqlite"}, exitOK},
		{[]string{"migrate", "-dsn", db}, exitOK},
		{[]string{"stats", "-dsn", db}, exitOK},
		{[]string{"check", "-dsn", db}, exitOK},
		{[]string{"check", "-dsn", db, "-table", "other"}, exitFail},
		{[]string{"cleanup", "-dsn", db, "-older-than", "1d"}, exitOK},
		{[]string{"stats", "-dsn", db, "-table", "other"}, exitFail},
		{[]string{"stats", "-dsn", "sqlite://" + filepath.Join(dir, "missing.db")}, exitFail},
		{[]string{}, exitUsage},
		{[]string{"vacuum"}, exitUsage},
		{[]string{"stats", "-dsn", db, "-bogus"}, exitUsage},
		{[]string{"schema", "-dialect", "oracle"}, exitUsage},
		{[]string{"cleanup", "-dsn", db}, exitUsage},
	} {
		if code, _, stderr := runCLI(t, tt.args...); code != tt.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tt.args, code, tt.code, stderr)
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
		{"mariadb", "mysql://" + testenv.MySQLDSN(t), "UTC_TIMESTAMP(6) - INTERVAL 2 HOUR", "UTC_TIMESTAMP(6)"},
		{"sqlite", "sqlite://" + filepath.Join(t.TempDir(), "inbox.db"), "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours')",
			"strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"},
	}
}

// open connects to d as the command would, for the test's own SQL.
func (d database) open(t *testing.T) (*sql.DB, sqlinbox.Dialect) {
	t.Helper()
	x := &cli{dialects: dialects{Postgres(), MySQL(), SQLite()}}
	c := x.newCommand("test")
	c.dsn, c.table = d.dsn, "inbox"
	resolved, dsn, err := c.resolve(true)
	if err != nil {
		t.Fatal(err)
	}
	dialect := resolved.Dialect
	db, err := resolved.Open(dsn, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// A SQLite file exists from here on, as a service's would.
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, dialect
}

// insert adds n claims of consumer, with processed_at set by the expression age.
func insert(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, table, consumer string, n int, age string) {
	t.Helper()
	var values []string
	var args []any
	for i := range n {
		p1, p2 := "?", "?"
		if dialect.Name() == (sqlinbox.Postgres{}).Name() {
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

// qualifiedTable returns a new table name qualified by a new schema (PostgreSQL, not on the
// search path) or database (MariaDB), dropped with everything in it when the test ends.
func qualifiedTable(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect) string {
	t.Helper()
	schema, drop := testenv.Name("app"), "DROP SCHEMA IF EXISTS %s CASCADE"
	if dialect.Name() == (sqlinbox.MySQL{}).Name() {
		drop = "DROP DATABASE IF EXISTS %s"
	}
	if _, err := db.ExecContext(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.WithoutCancel(context.Background()), fmt.Sprintf(drop, schema)) })
	return schema + "." + testenv.Name("cli_inbox")
}

// Against each database, with the table's name alone and qualified by a schema that is not
// on PostgreSQL's search path (a database on MariaDB): migrate creates the table (twice is
// fine), stats and cleanup fail clearly before it exists, check passes it, cleanup deletes
// exactly the expired claims with a bar or a summary line, and stats reports what is left.
// On SQLite a qualified name is refused by every command. PostgreSQL also through PgBouncer
// in transaction mode, with the DSN as a user writes it (TestEveryCommandThroughAPooler).
func TestCommandsAgainstDatabases(t *testing.T) {
	pooled := database{"postgres/pgbouncer", testenv.PgBouncerURL(t, 4), "now() - interval '2 hours'", "now()"}
	for _, d := range append(databases(t), pooled) {
		for _, qualified := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/qualified=%v", d.name, qualified), func(t *testing.T) {
				t.Parallel()
				testCommandsAgainst(t, d, qualified)
			})
		}
	}
}

func testCommandsAgainst(t *testing.T, d database, qualified bool) {
	db, dialect := d.open(t)
	table := testenv.Name("cli_inbox")
	if qualified && dialect.Name() == (sqlinbox.SQLite{}).Name() {
		for _, command := range [][]string{{"migrate"}, {"check"}, {"stats"}, {"cleanup", "-older-than", "1d"}, {"schema"}} {
			wantError(t, append(command, "-dsn", d.dsn, "-table", "app.billing_inbox"), exitUsage, "SQLite has no schemas")
		}
		return
	}
	if qualified {
		table = qualifiedTable(t, db, dialect)
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
	})
	common := []string{"-dsn", d.dsn, "-table", table}

	wantError(t, append([]string{"stats"}, common...), exitFail, fmt.Sprintf("inbox table %q is missing", table))
	wantError(t, append([]string{"cleanup", "-older-than", "1h"}, common...), exitFail, "watermill-inbox migrate")

	for range 2 {
		code, stdout, stderr := runCLI(t, append([]string{"migrate"}, common...)...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "are in place") {
			t.Fatalf("migrate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	}
	if code, stdout, stderr := runCLI(t, append([]string{"check"}, common...)...); code != 0 || !strings.Contains(stdout, "can guard") {
		t.Fatalf("check: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	insert(t, db, dialect, table, "billing", 250, d.age)
	insert(t, db, dialect, table, "gone_consumer", 40, d.age)
	insert(t, db, dialect, table, "billing_new", 10, d.now)

	code, stdout, stderr := runCLI(t, append([]string{"stats"}, common...)...)
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

	// Not a terminal: lines, here one per batch but the last, then the summary.
	code, stdout, stderr = runCLI(t, append([]string{"cleanup", "-older-than", "1h", "-batch-size", "100", "-progress-every", "0"}, common...)...)
	wantLines := []string{
		fmt.Sprintf(`^counting the claims older than 1h0m0s in %q$`, table),
		`^290 claims to delete, in batches of 100$`,
		`^deleted 100 of 290 claims in 1 batch, \d+ rows/s, 190 left, about \d+s to go$`,
		`^deleted 200 of 290 claims in 2 batches, \d+ rows/s, 90 left, about \d+s to go$`,
		fmt.Sprintf(`^deleted 290 claims older than 1h0m0s from %q in 3 batches, \S+ \(\d+ rows/s\)$`, table),
	}
	if lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); code != 0 || stderr != "" || len(lines) != len(wantLines) {
		t.Errorf("cleanup: exit %d, stderr %q, stdout:\n%s\nwant %d lines", code, stderr, stdout, len(wantLines))
	} else {
		for i, want := range wantLines {
			if !regexp.MustCompile(want).MatchString(lines[i]) {
				t.Errorf("cleanup: line %d is %q, want %s", i+1, lines[i], want)
			}
		}
	}
	// The default interval (10 s) prints no progress line in a pass this short, and
	// a pass with nothing to delete takes 1 batch, in the singular.
	code, stdout, _ = runCLI(t, append([]string{"cleanup", "-older-than", "1h"}, common...)...)
	if want := "0 claims to delete"; code != 0 || strings.Count(stdout, "\n") != 3 || !strings.Contains(stdout, want) ||
		!strings.Contains(stdout, "deleted 0 claims older than 1h0m0s from "+fmt.Sprintf("%q", table)+" in 1 batch,") {
		t.Errorf("cleanup of nothing: exit %d, stdout %q", code, stdout)
	}
	// -progress none: no count, one summary line.
	code, stdout, _ = runCLI(t, append([]string{"cleanup", "-older-than", "1h", "-progress", "none"}, common...)...)
	if code != 0 || strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, "deleted 0 claims") {
		t.Errorf("cleanup -progress none: exit %d, stdout %q", code, stdout)
	}
	code, stdout, _ = runCLI(t, append([]string{"stats"}, common...)...)
	if code != 0 || !regexp.MustCompile(`(?m)^claims\s+10$`).MatchString(stdout) || strings.Contains(stdout, "gone_consumer") {
		t.Errorf("stats after cleanup: exit %d, want 10 claims left, none of gone_consumer:\n%s", code, stdout)
	}

	// With the bar: redrawn lines up to 100%, then the summary.
	insert(t, db, dialect, table, "replayed", 150, d.age)
	code, stdout, stderr = runCLI(t, append([]string{"cleanup", "-older-than", "1h", "-batch-size", "100", "-progress", "bar"}, common...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("cleanup with bar: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"\rcounting the claims", "\r150 claims to delete", "\r[", "100/150 rows",
		"\r[" + strings.Repeat("#", 30) + "] 100% 150/150 rows", "\ndeleted 150 claims"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("cleanup with bar: stdout %q, want it to contain %q", stdout, want)
		}
	}

	// Another cleanup holds the lock: exit 3, nothing deleted.
	parsed, err := dialect.ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	if lock, release, key := dialect.CleanupLock(parsed); lock != "" {
		insert(t, db, dialect, table, "locked", 5, d.age)
		// A transaction lock is held by an open transaction, a session lock by the
		// connection.
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var holder interface {
			QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		} = conn
		if release == "" { // a transaction lock
			tx, err := conn.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			holder = tx
		}
		var got int
		if err := holder.QueryRowContext(context.Background(), lock, key).Scan(&got); err != nil || got != 1 {
			t.Fatalf("take the cleanup lock: %d, %v", got, err)
		}
		wantError(t, append([]string{"cleanup", "-older-than", "1h", "-progress", "none"}, common...), exitBusy,
			"another cleanup of this table is running")
		if code, stdout, _ := runCLI(t, append([]string{"stats"}, common...)...); code != 0 || !regexp.MustCompile(`(?m)^locked\s+5\s`).MatchString(stdout) {
			t.Errorf("stats while locked: exit %d, want the 5 locked claims kept:\n%s", code, stdout)
		}
	}
}

// Against each database: check fails (exit 1) for a missing table and for one that cannot
// guard, with the reason; migrate fails on such an existing table; stats shows the verdict;
// a table migrate created passes check.
func TestCheckCommand(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, dialect := d.open(t)
			bad, good := testenv.Name("cli_bad"), testenv.Name("cli_good")
			t.Cleanup(func() {
				for _, table := range []string{bad, good} {
					_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
				}
			})
			// The upgrade policy: the refusal names the command that writes the migration.
			wantError(t, []string{"check", "-dsn", d.dsn, "-table", bad}, exitFail,
				`it does not exist; write its migration with "watermill-inbox schema -format goose -dialect `+dialect.Name()+` -table `+bad+` -out DIR"`)

			// A table as a migration tool could make it: the right columns, no primary key.
			if _, err := db.ExecContext(context.Background(), "CREATE TABLE "+bad+
				" (consumer VARCHAR(255) NOT NULL, message_id VARCHAR(255) NOT NULL, processed_at TIMESTAMP, payload_hash VARCHAR(64), produced VARCHAR(255))"); err != nil {
				t.Fatal(err)
			}
			reason := "cannot guard against duplicates: it has no primary key"
			wantError(t, []string{"check", "-dsn", d.dsn, "-table", bad}, exitFail, reason)
			wantError(t, []string{"migrate", "-dsn", d.dsn, "-table", bad}, exitFail, reason)
			code, stdout, stderr := runCLI(t, "stats", "-dsn", d.dsn, "-table", bad)
			if code != exitOK || !regexp.MustCompile(`(?m)^guards\s+NO: table \S+ `+reason).MatchString(stdout) {
				t.Errorf("stats on the bad table: exit %d, stderr %q, stdout:\n%s\nwant a line guards NO: ... %s", code, stderr, stdout, reason)
			}

			if code, stdout, stderr := runCLI(t, "migrate", "-dsn", d.dsn, "-table", good); code != exitOK || !strings.Contains(stdout, "can guard") {
				t.Fatalf("migrate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			code, stdout, stderr = runCLI(t, "check", "-dsn", d.dsn, "-table", good)
			if want := fmt.Sprintf("inbox table %q can guard against duplicates", good); code != exitOK || stderr != "" || !strings.HasPrefix(stdout, want) {
				t.Errorf("check: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
			}
			if code, stdout, _ := runCLI(t, "stats", "-dsn", d.dsn, "-table", good); code != exitOK || !regexp.MustCompile(`(?m)^guards\s+yes$`).MatchString(stdout) {
				t.Errorf("stats: exit %d, want a line guards yes:\n%s", code, stdout)
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

// The CLI commands README.md and the pages of docs/ show, run as written in the order shown,
// against a new SQLite database in INBOX_DSN, each in a new working directory that holds an
// empty migrations folder: each must succeed, so that the documentation cannot drift from
// the flags. docs/operating.md must show all four.
func TestDocumentedCommands(t *testing.T) {
	t.Setenv(dsnVar, "sqlite://"+filepath.Join(t.TempDir(), "inbox.db"))
	pages, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := append([]string{"../../../README.md"}, pages...)
	for i, doc := range docs {
		if docs[i], err = filepath.Abs(doc); err != nil {
			t.Fatal(err)
		}
	}
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var commands int
		for _, line := range strings.Split(string(raw), "\n") {
			rest, ok := strings.CutPrefix(line, "go run ./cmd/watermill-inbox ")
			if !ok {
				continue
			}
			commands++
			args := shellWords(t, rest)
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "migrations"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Chdir(dir)
			if code, _, stderr := runCLI(t, args...); code != exitOK {
				t.Errorf("%s: %q: exit %d, stderr %q", doc, line, code, stderr)
			}
		}
		if commands < 4 && strings.HasSuffix(doc, "operating.md") {
			t.Errorf("%s shows %d commands of the CLI, want schema, migrate, cleanup and stats", doc, commands)
		}
	}
}

// shellWords splits a command line as sh would for the documented commands: words, double
// quotes, $VARIABLES expanded, a # comment dropped.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case c == '$':
			j := i + 1
			for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= '0' && line[j] <= '9') {
				j++
			}
			word.WriteString(os.Getenv(line[i+1 : j]))
			i, inWord = j-1, true
		case c == '#' && !quoted && !inWord:
			i = len(line)
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// stats prints a consumer name with control characters quoted, with escapes, so that a name
// in the table (written by an older release or by hand: the middleware refuses them now)
// neither drives the terminal nor breaks the columns.
func TestStatsEscapesConsumerNames(t *testing.T) {
	d := databases(t)[2] // SQLite: the printing does not depend on the database
	if code, _, stderr := runCLI(t, "migrate", "-dsn", d.dsn); code != exitOK {
		t.Fatalf("migrate: exit %d, stderr %q", code, stderr)
	}
	db, _ := d.open(t)
	evil, tabbed := "evil\x1b]0;TITLE\x07\x1b[2J", "tab\there\nnext"
	for _, claim := range [][2]string{{evil, "k1"}, {evil, "k2"}, {tabbed, "k1"}, {tabbed, "k3"}, {"billing", "k4"}} {
		if _, err := db.Exec("INSERT INTO inbox (consumer, message_id) VALUES (?, ?)", claim[0], claim[1]); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runCLI(t, "stats", "-dsn", d.dsn)
	if code != exitOK {
		t.Fatalf("stats: exit %d, stderr %q", code, stderr)
	}
	if strings.ContainsAny(stdout, "\x1b\x07\t") {
		t.Errorf("stats wrote control characters raw:\n%q", stdout)
	}
	for _, want := range []string{
		`(?m)^"evil\\x1b\]0;TITLE\\a\\x1b\[2J"\s+2\s+20`, `(?m)^"tab\\there\\nnext"\s+2\s+20`, `(?m)^billing\s+1\s+20`,
		`(?m)^1\s+"evil\\x1b\]0;TITLE\\a\\x1b\[2J", "tab\\there\\nnext"\s+yes`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("stats output does not match %s:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\nnext") {
		t.Errorf("a consumer name broke a line:\n%s", stdout)
	}
}

// No error line shows a DSN's password, whatever it holds (an unencoded "@" among others) and
// whether the DSN parses or not, given by -dsn or INBOX_DSN.
func TestErrorsNeverShowTheDSNsPassword(t *testing.T) {
	for _, tt := range []struct {
		dsn, password string
		code          int
	}{
		{"postgres://alice:p@ssS3cret@127.0.0.1:1/test?sslmode=bogus", "p@ssS3cret", exitUsage},
		{"postgres://alice:p@ss%zzS3cret@127.0.0.1:1/test", "p@ss%zzS3cret", exitUsage},
		{"postgres://alice:p@ssS3cret@127.0.0.1:1/test?connect_timeout=5", "p@ssS3cret", exitFail},
		{"postgres://alice:s3cr%40t!@127.0.0.1:1/test?sslmode=bogus", "s3cr@t!", exitUsage},
		{"postgres://alice@127.0.0.1:1/test?password=Hunter2Secret&sslmode=bogus", "Hunter2Secret", exitUsage},
		{"host=127.0.0.1 port=1 user=alice password='p@ss S3cret' sslmode=bogus", "S3cret", exitUsage},
		{"mysql://alice:p@ssS3cret@tcp(127.0.0.1:1)/test?bogus=%zz", "p@ssS3cret", exitUsage},
		{"mysql://alice:p@ssS3cret@tcp(127.0.0.1:1)/test", "p@ssS3cret", exitFail},
		// "?", "&" and "@" in a password, unencoded, in every form.
		{"postgres://app:Se?cretPW@127.0.0.1:badport/test", "Se?cretPW", exitUsage},
		{"postgres://app:Se?cr@etPW@127.0.0.1:1/test?connect_timeout=5", "Se?cr@etPW", exitFail},
		{"postgres://alice@127.0.0.1:1/test?password=Sec%26retPW&sslmode=bogus", "Sec&retPW", exitUsage},
		{"host=127.0.0.1 port=1 user=alice password=Sec&retPW sslmode=bogus", "Sec&retPW", exitUsage},
		{"host=127.0.0.1 port=1 user=alice password=Sec&retPW connect_timeout=5", "Sec&retPW", exitFail},
		{"mysql://alice:p@ss?w0rd@tcp(127.0.0.1:1)/test", "p@ss?w0rd", exitFail},
		{"alice:p@ss?w0rd@tcp(127.0.0.1:1)/test", "p@ss?w0rd", exitFail},
		{"alice:p@ss?w0rd@tcp(127.0.0.1:1)/test?bogus=%zz", "p@ss?w0rd", exitUsage},
	} {
		dialect := []string{}
		switch {
		case strings.Contains(tt.dsn, "@tcp(") && !strings.Contains(tt.dsn, "://"):
			dialect = []string{"-dialect", "mysql"}
		case !strings.Contains(tt.dsn, "://"):
			dialect = []string{"-dialect", "postgres"}
		}
		for _, fromEnv := range []bool{false, true} {
			args := append([]string{"stats"}, dialect...)
			if fromEnv {
				t.Setenv(dsnVar, tt.dsn)
			} else {
				t.Setenv(dsnVar, "")
				args = append(args, "-dsn", tt.dsn)
			}
			code, _, stderr := runCLI(t, args...)
			if code != tt.code {
				t.Errorf("%q (from INBOX_DSN: %v): exit %d, want %d (stderr %q)", tt.dsn, fromEnv, code, tt.code, stderr)
			}
			for _, secret := range []string{tt.password, "S3cret", "ssS3cret", "retPW", "cretPW", "w0rd", "Sec%26retPW"} {
				if strings.Contains(tt.password, secret) && strings.Contains(stderr, secret) {
					t.Errorf("%q: stderr shows %q: %s", tt.dsn, secret, stderr)
				}
			}
			// The rest of the line is as the driver wrote it: no letter of the password turned
			// into xxxxx wherever it occurs.
			if strings.Count(stderr, redacted) > 2 {
				t.Errorf("%q: the line is mangled: %s", tt.dsn, stderr)
			}
		}
	}
}

// check as a readiness exec probe: a database that refuses the connection fails it (exit 1,
// with the reason), as a missing table does (TestCheckCommand); a good table passes it.
func TestCheckCommandWithoutTheDatabase(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	listener.Close() // nothing listens there now: the connection is refused
	wantError(t, []string{"check", "-dsn", "postgres://postgres@" + addr + "/test?connect_timeout=5", "-table", "inbox"}, exitFail, "refused")
}

// A hostile table: a column whose name holds ESC and BEL (anyone who can create a column can
// name it), and on SQLite a processed_at text holding them. check's refusal and stats' lines
// print them quoted, with escapes, never raw: on every database.
func TestHostileTableIsPrintedQuoted(t *testing.T) {
	const evil = "evil\x1b]0;TITLE\x07\x1b[2J"
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, dialect := d.open(t)
			table := testenv.Name("cli_hostile")
			t.Cleanup(func() {
				_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
			})
			if code, _, stderr := runCLI(t, "migrate", "-dsn", d.dsn, "-table", table); code != exitOK {
				t.Fatalf("migrate: exit %d, stderr %q", code, stderr)
			}
			quote := `"`
			if dialect.Name() == (sqlinbox.MySQL{}).Name() {
				quote = "`"
			}
			column := quote + evil + quote
			if dialect.Name() == (sqlinbox.SQLite{}).Name() {
				// SQLite adds no NOT NULL column without a default: the table is made again with it.
				var ddl string
				if err := db.QueryRow("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&ddl); err != nil {
					t.Fatal(err)
				}
				for _, statement := range []string{
					"INSERT INTO " + table + " (consumer, message_id, processed_at) VALUES ('billing', 'k1', '" + evil + "')",
					"ALTER TABLE " + table + " RENAME TO " + table + "_old",
					strings.Replace(ddl, "PRIMARY KEY", column+" INTEGER NOT NULL, PRIMARY KEY", 1),
					"INSERT INTO " + table + " (consumer, message_id, processed_at, " + column + ") SELECT consumer, message_id, processed_at, 0 FROM " + table + "_old",
					"DROP TABLE " + table + "_old",
				} {
					if _, err := db.Exec(statement); err != nil {
						t.Fatalf("%q: %v", statement, err)
					}
				}
			} else if _, err := db.Exec("ALTER TABLE " + table + " ADD COLUMN " + column + " INT NOT NULL"); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI(t, "check", "-dsn", d.dsn, "-table", table)
			if code != exitFail || strings.ContainsAny(stdout+stderr, "\x1b\x07") {
				t.Errorf("check: exit %d, output written raw: %q %q", code, stdout, stderr)
			}
			if want := `evil\x1b]0;TITLE\a\x1b[2J`; !strings.Contains(stderr, want) {
				t.Errorf("check: %q, want the column's name quoted as %s", stderr, want)
			}
			code, stdout, stderr = runCLI(t, "stats", "-dsn", d.dsn, "-table", table)
			if code != exitOK || strings.ContainsAny(stdout+stderr, "\x1b\x07") {
				t.Errorf("stats: exit %d, output written raw: %q %q", code, stdout, stderr)
			}
			if !regexp.MustCompile(`(?m)^guards\s+NO: .*evil\\+x1b`).MatchString(stdout) {
				t.Errorf("stats: want the guards line with the column's name quoted:\n%s", stdout)
			}
			if dialect.Name() == (sqlinbox.SQLite{}).Name() && !regexp.MustCompile(`(?m)^oldest claim\s+"evil\\x1b`).MatchString(stdout) {
				t.Errorf("stats: want the processed_at text quoted:\n%s", stdout)
			}
		})
	}
}

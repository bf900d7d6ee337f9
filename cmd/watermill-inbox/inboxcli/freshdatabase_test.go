package inboxcli

import (
	"context"
	"database/sql"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// fileVersion returns the version of a migration file's name.
func fileVersion(t *testing.T, name string) int64 {
	t.Helper()
	digits, _, _ := strings.Cut(name, "_")
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		t.Fatalf("%s has no version: %v", name, err)
	}
	return v
}

// Migrations written into one folder never share a version: tables written within one second
// without -version each get one of their own, after every version the folder holds (a
// folder numbered in the future included); a -version another migration has (00042 and 42
// are one to both tools) is refused, -force or not; and tables whose names differ only where
// the schema ends get two migrations, neither replacing the other.
func TestSchemaVersionsAndNamesNeverCollide(t *testing.T) {
	for _, format := range []string{"goose", "golang-migrate"} {
		dir := t.TempDir()
		tables := []string{"app.billing_inbox", "app_billing.inbox", "app.shipping_inbox", "app.audit_inbox"}
		for _, table := range tables {
			if code, _, stderr := runCLI(t, "schema", "-format", format, "-dialect", "postgres", "-table", table, "-out", dir); code != exitOK {
				t.Fatalf("%s: schema -table %s: exit %d, %s", format, table, code, stderr)
			}
		}
		byVersion := map[int64][]string{}
		for name := range folder(t, dir) {
			if !strings.HasSuffix(name, ".down.sql") {
				byVersion[fileVersion(t, name)] = append(byVersion[fileVersion(t, name)], name)
			}
		}
		if len(byVersion) != len(tables) {
			t.Errorf("%s: %d tables written at once got versions %v, want %d", format, len(tables), byVersion, len(tables))
		}

		// A folder whose last migration is numbered in the future: the next one comes after it.
		if err := os.WriteFile(filepath.Join(dir, "29991231235959_create_later.sql"), []byte("-- +goose Up\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(t, "schema", "-format", format, "-dialect", "postgres", "-table", "after_later", "-out", dir)
		if code != exitOK || !strings.Contains(stdout, "29991231235960_create_after_later") {
			t.Errorf("%s: after a migration of the future: exit %d, stdout %q, stderr %q; want version 29991231235960, the one after the last", format, code, stdout, stderr)
		}

		before := folder(t, dir)
		first := slices.Sorted(maps.Keys(before))[0]
		version, _, _ := strings.Cut(first, "_")
		for _, args := range [][]string{
			{"-version", version}, {"-version", version, "-force"}, {"-version", "000" + version},
		} {
			wantError(t, append([]string{"schema", "-format", format, "-dialect", "postgres", "-table", "other_inbox", "-out", dir}, args...),
				exitFail, "version "+strings.TrimLeft(version, "0")+" is taken by "+first)
		}
		if after := folder(t, dir); !maps.Equal(before, after) {
			t.Errorf("%s: a refused version changed the folder", format)
		}
	}
}

// migrate makes the processed_at index of a table whose name takes all 63 bytes, which it
// reports in place, and fails on a table it finds without one, as check and stats report;
// check still passes such a table (it guards; only retention is slower).
func TestMigrateVerifiesTheRetentionIndex(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, dialect := d.open(t)
			long := "x" + strings.ToLower(testenv.Name("i"))
			long += strings.Repeat("n", 63-len(long))
			bare := testenv.Name("cli_noindex")
			t.Cleanup(func() {
				for _, table := range []string{long, bare} {
					_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
				}
			})
			code, stdout, stderr := runCLI(t, "migrate", "-dsn", d.dsn, "-table", long)
			if code != exitOK || !strings.Contains(stdout, "and its processed_at index are in place") {
				t.Fatalf("migrate of a 63-byte name: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if n := retentionIndexes(t, db, dialect, long); n != 1 {
				t.Errorf("the 63-byte table has %d indexes on processed_at, want 1", n)
			}

			create := "CREATE TABLE " + bare + " (consumer VARCHAR(255) NOT NULL, message_id VARCHAR(255) NOT NULL, processed_at TEXT NOT NULL DEFAULT 'x', payload_hash BLOB, produced BLOB, PRIMARY KEY (consumer, message_id))"
			switch dialect.Name() {
			case (sqlinbox.Postgres{}).Name():
				create = "CREATE TABLE " + bare + ` (consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`
			case (sqlinbox.MySQL{}).Name():
				create = "CREATE TABLE " + bare + " (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"
			}
			if _, err := db.ExecContext(context.Background(), create); err != nil {
				t.Fatal(err)
			}
			if dialect.Name() == (sqlinbox.MySQL{}).Name() {
				// MySQL has no CREATE INDEX IF NOT EXISTS: migrate cannot add it, and says so.
				wantError(t, []string{"migrate", "-dsn", d.dsn, "-table", bare}, exitFail, "has no index that starts with processed_at")
			} else if code, stdout, _ := runCLI(t, "migrate", "-dsn", d.dsn, "-table", bare); code != exitOK || retentionIndexes(t, db, dialect, bare) != 1 {
				t.Errorf("migrate of a table without the index: exit %d, stdout %q, want the index made", code, stdout)
			}
		})
	}
	// check and stats on a table without the index.
	d := databases(t)[1]
	db, dialect := d.open(t)
	bare := testenv.Name("cli_noindex")
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+bare)
	})
	if _, err := db.ExecContext(context.Background(), "CREATE TABLE "+bare+" (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if retentionIndexes(t, db, dialect, bare) != 0 {
		t.Fatal("the bare table has an index on processed_at")
	}
	code, stdout, stderr := runCLI(t, "check", "-dsn", d.dsn, "-table", bare)
	if code != exitOK || !strings.Contains(stdout, "can guard against duplicates") || !strings.Contains(stdout, "has no index that starts with processed_at") {
		t.Errorf("check of a table without the index: exit %d, stdout %q, stderr %q; want 0, and the missing index named", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, "stats", "-dsn", d.dsn, "-table", bare); code != exitOK || !regexp.MustCompile(`(?m)^retention index\s+NO: `).MatchString(stdout) {
		t.Errorf("stats of a table without the index: exit %d, want a line retention index NO:\n%s", code, stdout)
	}
}

// retentionIndexes counts table's indexes that start with processed_at, by the dialect's query.
func retentionIndexes(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, table string) int {
	t.Helper()
	parsed, err := dialect.ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	query, args := dialect.RetentionIndex(parsed)
	var n int
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

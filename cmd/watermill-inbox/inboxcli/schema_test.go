package inboxcli

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// folder returns the files of dir by name, temporary ones included.
func folder(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		content := "(a folder)"
		if !e.IsDir() {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			content = string(data)
		}
		files[e.Name()] = content
	}
	return files
}

// filesByName returns the files of fsys by name, failing t on err or a file it cannot read.
func filesByName(t *testing.T, fsys fs.FS, err error) map[string]string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	files, err := readFiles(fsys)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, f := range files {
		byName[f.name] = f.content
	}
	return byName
}

// libraryFiles returns sqlinbox.MigrationFiles's files by name.
func libraryFiles(t *testing.T, dialect sqlinbox.Dialect, table string, format sqlinbox.MigrationFormat, version string) map[string]string {
	t.Helper()
	fsys, err := sqlinbox.MigrationFiles(dialect, table, format, version)
	return filesByName(t, fsys, err)
}

// schema -out writes exactly the library's files for each format and dialect, numbered
// -version or the time in UTC, and nothing else (no temporary file is left); without -out a
// format of one file prints it.
func TestSchemaWritesMigrationFiles(t *testing.T) {
	for _, tt := range []struct {
		dialect sqlinbox.Dialect
		table   string
		names   map[sqlinbox.MigrationFormat][]string
	}{
		{sqlinbox.Postgres{}, "app.billing_inbox", map[sqlinbox.MigrationFormat][]string{
			sqlinbox.FormatGoose:         {"00042_create_app.billing_inbox.sql"},
			sqlinbox.FormatGolangMigrate: {"00042_create_app.billing_inbox.down.sql", "00042_create_app.billing_inbox.up.sql"},
			sqlinbox.FormatSQL:           {"00042_create_app.billing_inbox.sql"},
		}},
		{sqlinbox.MySQL{}, "test.billing_inbox", map[sqlinbox.MigrationFormat][]string{
			sqlinbox.FormatGoose:         {"00042_create_test.billing_inbox.sql"},
			sqlinbox.FormatGolangMigrate: {"00042_create_test.billing_inbox.down.sql", "00042_create_test.billing_inbox.up.sql"},
			sqlinbox.FormatSQL:           {"00042_create_test.billing_inbox.sql"},
		}},
		{sqlinbox.SQLite{}, "billing_inbox", map[sqlinbox.MigrationFormat][]string{
			sqlinbox.FormatGoose:         {"00042_create_billing_inbox.sql"},
			sqlinbox.FormatGolangMigrate: {"00042_create_billing_inbox.down.sql", "00042_create_billing_inbox.up.sql"},
			sqlinbox.FormatSQL:           {"00042_create_billing_inbox.sql"},
		}},
	} {
		for _, format := range formats {
			dir := t.TempDir()
			args := []string{"schema", "-format", string(format), "-dialect", tt.dialect.Name(), "-table", tt.table, "-out", dir, "-version", "00042"}
			code, stdout, stderr := runCLI(t, args...)
			var wantOut string
			for _, name := range tt.names[format] {
				wantOut += "wrote " + filepath.Join(dir, name) + "\n"
			}
			if code != exitOK || stderr != "" || stdout != wantOut {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", args, code, stdout, stderr, wantOut)
			}
			got, want := folder(t, dir), libraryFiles(t, tt.dialect, tt.table, format, "00042")
			if !maps.Equal(got, want) || !slices.Equal(slices.Sorted(maps.Keys(got)), tt.names[format]) {
				t.Errorf("%q wrote %v, want %v", args, slices.Sorted(maps.Keys(got)), tt.names[format])
			}

			// Without -out: the one file on stdout.
			code, stdout, _ = runCLI(t, "schema", "-format", string(format), "-dialect", tt.dialect.Name(), "-table", tt.table, "-version", "7")
			one := libraryFiles(t, tt.dialect, tt.table, format, "7")
			if len(one) == 1 {
				for _, content := range one {
					if code != exitOK || stdout != content {
						t.Errorf("schema -format %s without -out: exit %d, stdout\n%s\nwant\n%s", format, code, stdout, content)
					}
				}
			}
		}
	}

	dir := t.TempDir()
	if code, _, stderr := runCLI(t, "schema", "-format", "goose", "-dialect", "postgres", "-out", dir); code != exitOK {
		t.Fatalf("schema without -version: exit %d, %s", code, stderr)
	}
	for name := range folder(t, dir) {
		if !regexp.MustCompile(`^20\d{12}_create_inbox\.sql$`).MatchString(name) {
			t.Errorf("without -version: %s, want the time in UTC as the version (20060102150405_create_inbox.sql)", name)
		}
	}
	wantError(t, []string{"schema", "-format", "golang-migrate", "-dialect", "postgres"}, exitUsage,
		"-format golang-migrate writes 2 files: give -out")
}

// Bad input fails with one line on stderr and a non-zero exit status, and leaves the folder
// as it was: no file written, none replaced, no temporary file left.
func TestSchemaBadInputWritesNothing(t *testing.T) {
	dir := t.TempDir()
	existing := libraryFiles(t, sqlinbox.Postgres{}, "app.billing_inbox", sqlinbox.FormatGolangMigrate, "00001")
	for name := range existing {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("-- the team's copy\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	aFile := filepath.Join(dir, "00001_create_app.billing_inbox.up.sql")
	base := []string{"schema", "-dialect", "postgres", "-format", "golang-migrate", "-out", dir}
	for _, tt := range []struct {
		what   string
		args   []string
		code   int
		substr string
	}{
		{"-out is a file", []string{"schema", "-dialect", "postgres", "-out", aFile}, exitUsage, "is a file, not a folder"},
		{"-out does not exist", []string{"schema", "-dialect", "postgres", "-out", filepath.Join(dir, "typo")}, exitUsage, "does not exist"},
		{"a table name that could carry SQL", append(base, "-table", "inbox; DROP TABLE users"), exitUsage, "invalid table name"},
		{"an unknown format", []string{"schema", "-dialect", "postgres", "-format", "flyway", "-out", dir}, exitUsage, `unknown -format "flyway"`},
		{"a schema on SQLite", []string{"schema", "-dialect", "sqlite", "-table", "app.billing_inbox", "-out", dir}, exitUsage, "SQLite has no schemas"},
		{"a bad version", append(base, "-version", "v2"), exitUsage, `migration version "v2"`},
		{"the files exist", append(base, "-table", "app.billing_inbox", "-version", "00001"), exitFail, "give -force to replace it"},
		{"the table's migration exists under another version", append(base, "-table", "app.billing_inbox"), exitFail,
			"already holds the migration of this table: 00001_create_app.billing_inbox.down.sql, 00001_create_app.billing_inbox.up.sql; to write it again, give -version 00001 -force"},
		{"-force with another version", append(base, "-table", "app.billing_inbox", "-version", "00002", "-force"), exitFail, "give -version 00001 -force"},
	} {
		before := folder(t, dir)
		wantError(t, tt.args, tt.code, tt.substr)
		if after := folder(t, dir); !maps.Equal(before, after) {
			t.Errorf("%s: the folder changed: %v, was %v", tt.what, slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
		}
	}

	// A folder that cannot be written (as root, whom permissions do not stop: /proc).
	locked := t.TempDir()
	if os.Geteuid() == 0 {
		locked = "/proc"
	} else if err := os.Chmod(locked, 0o555); err != nil {
		t.Fatal(err)
	}
	wantError(t, []string{"schema", "-dialect", "postgres", "-format", "golang-migrate", "-out", locked}, exitFail, "schema: write into "+locked)
	left, err := filepath.Glob(filepath.Join(locked, "*inbox*"))
	if err != nil || len(left) > 0 {
		t.Errorf("not writable: left behind %v (%v)", left, err)
	}

	// The second rename fails (its name is a folder): the first file is taken back.
	if err := os.Mkdir(filepath.Join(dir, "00009_create_other.up.sql"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00009_create_other.up.sql", "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := folder(t, dir)
	wantError(t, append(base, "-table", "other", "-version", "00009", "-force"), exitFail, "schema: write into")
	if after := folder(t, dir); !maps.Equal(before, after) {
		t.Errorf("after a failed rename: the folder holds %v, was %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
	}

	// -force with the migration's own version replaces its files.
	if code, _, stderr := runCLI(t, append(base, "-table", "app.billing_inbox", "-version", "00001", "-force")...); code != exitOK {
		t.Fatalf("-force: exit %d, %s", code, stderr)
	}
	got := folder(t, dir)
	for name, content := range existing {
		if got[name] != content {
			t.Errorf("-force: %s is %q, want the migration", name, got[name])
		}
	}
}

// -upgrade writes the library's upgrade of the table (the column unpublished, and MySQL's
// processed_at in UTC); for a dialect without one (SQLite) it says so and writes nothing.
func TestSchemaUpgrade(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, "schema", "-upgrade", "-format", "golang-migrate", "-dialect", "mysql", "-table", "billing_inbox", "-version", "00043", "-out", dir)
	want := libraryUpgrade(t, sqlinbox.MySQL{}, "billing_inbox", sqlinbox.FormatGolangMigrate, "00043")
	if got := folder(t, dir); code != exitOK || stderr != "" || !maps.Equal(got, want) || len(got) != 2 {
		t.Errorf("schema -upgrade: exit %d, stdout %q, stderr %q, wrote %v; want %v", code, stdout, stderr, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	pgDir := t.TempDir()
	code, stdout, stderr = runCLI(t, "schema", "-upgrade", "-format", "goose", "-dialect", "postgres", "-table", "billing_inbox", "-version", "7", "-out", pgDir)
	want = libraryUpgrade(t, sqlinbox.Postgres{}, "billing_inbox", sqlinbox.FormatGoose, "7")
	if got := folder(t, pgDir); code != exitOK || stderr != "" || !maps.Equal(got, want) || len(got) != 1 {
		t.Errorf("schema -upgrade -dialect postgres: exit %d, stdout %q, stderr %q, wrote %v", code, stdout, stderr, slices.Sorted(maps.Keys(got)))
	}
	empty := t.TempDir()
	code, stdout, _ = runCLI(t, "schema", "-upgrade", "-dialect", "sqlite", "-out", empty)
	if code != exitOK || !strings.Contains(stdout, "no upgrade to write") || len(folder(t, empty)) != 0 {
		t.Errorf("schema -upgrade -dialect sqlite: exit %d, stdout %q, wrote %v", code, stdout, folder(t, empty))
	}
}

// libraryUpgrade returns sqlinbox.UpgradeFiles's files by name.
func libraryUpgrade(t *testing.T, dialect sqlinbox.Dialect, table string, format sqlinbox.MigrationFormat, version string) map[string]string {
	t.Helper()
	fsys, err := sqlinbox.UpgradeFiles(dialect, table, format, version)
	return filesByName(t, fsys, err)
}

package sqlinbox

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

// MigrationFormat is the layout of one migration tool's files; see [MigrationFiles].
type MigrationFormat string

// The formats [MigrationFiles] writes.
const (
	// FormatGoose is one file, {version}_{name}.sql, with a "-- +goose Up" and a
	// "-- +goose Down" section, for github.com/pressly/goose.
	FormatGoose MigrationFormat = "goose"
	// FormatGolangMigrate is two files, {version}_{name}.up.sql and
	// {version}_{name}.down.sql, for github.com/golang-migrate/migrate. Atlas imports this
	// layout (atlas migrate import --from "file://DIR?format=golang-migrate") and sqlc reads
	// it as a schema, skipping the down files.
	FormatGolangMigrate MigrationFormat = "golang-migrate"
	// FormatSQL is one file, {version}_{name}.sql, holding the up statements alone: Atlas's
	// own directory layout (atlas migrate hash after adding it) and any runner of plain
	// scripts.
	FormatSQL MigrationFormat = "sql"
)

// MigrationFiles returns the migration that creates the inbox table table in dialect, as
// files laid out for the migration tool format, for a team that creates its tables with its
// own tool: write them into its migrations folder (the CLI's "watermill-inbox schema -format
// goose -out DIR" does) or embed the [fs.FS] in a binary. The files are at the root of the
// [fs.FS], which both tools take as it is: goose.NewProvider(dialect, db, fsys) and
// golang-migrate's iofs.New(fsys, ".").
//
// The up statements are exactly [SchemaSQL]'s, which create a qualified table's schema first
// if it does not exist; the down statement drops the table, and its index and claims with
// it, but not the schema, which other tables may share. The name is create_ and the table's
// name as given, its schema and the dot included ("create_app.billing_inbox"), so that two
// tables never share one (app.billing_inbox and app_billing.inbox). version numbers the
// files: "" takes the time now in UTC, as goose create and golang-migrate's migrate create
// do (20261201150405); a team that numbers its migrations in sequence gives the next number
// as its folder writes them ("00042"): 1 to 19 digits, not 0. Both tools refuse a folder in
// which two migrations have one version: to write several in one second, give each its own
// (the CLI's schema -out picks one no file of the folder has). Called at run time, to embed
// the files, it needs a fixed version, or every start numbers a new migration.
//
// The library keeps no version table of its own: the team's tool records what it applied.
// A release that changes the table ships a migration of its own to add after this one.
func MigrationFiles(dialect Dialect, table string, format MigrationFormat, version string) (fs.FS, error) {
	t, err := parseTable(dialect, table)
	if err != nil {
		return nil, err
	}
	return migration("create", table, dialect.CreateTable(t), []string{"DROP TABLE IF EXISTS " + t.Quoted}, format, version)
}

// UpgradeFiles returns the migration that brings the inbox table table, made by an earlier
// release, to this release's shape in dialect ([Dialect.UpgradeTable]), laid out as
// [MigrationFiles] lays out the table's first migration: add it after that one. The name is
// upgrade_, the table's name as given and the upgrade's ("upgrade_inbox_unpublished"); the
// version is MigrationFiles's. The upgrade changes nothing on a table that has the shape
// already, so it is safe on a table this release created. A dialect without an upgrade
// returns an error saying so.
//
// The upgrades so far: the column unpublished and its index, which the relay needs (see
// [RelaySQL]; "unpublished" on PostgreSQL); and on [MySQL]/MariaDB, in the same migration
// (utc_processed_at_unpublished), processed_at holds the time in UTC: it converts the claims
// the table holds from the time zone of the session that runs it, so run it in a session of
// the zone your services' sessions had. [SQLite] has none: it cannot add a column only if it
// is missing.
func UpgradeFiles(dialect Dialect, table string, format MigrationFormat, version string) (fs.FS, error) {
	t, err := parseTable(dialect, table)
	if err != nil {
		return nil, err
	}
	name, up, down := dialect.UpgradeTable(t)
	if name == "" {
		return nil, fmt.Errorf("sqlinbox: the %s dialect has no upgrade of the inbox table: there is no upgrade that is safe to run twice; "+
			"a table without the column unpublished works without a relay (see RelaySQL)", dialect.Name())
	}
	return migration("upgrade", table+"_"+name, up, down, format, version)
}

// migration lays out the migration verb_name of the statements up and down as format's files.
func migration(verb, name string, up, down []string, format MigrationFormat, version string) (fs.FS, error) {
	if version == "" {
		version = time.Now().UTC().Format("20060102150405")
	}
	if err := validateVersion(version); err != nil {
		return nil, err
	}
	name = version + "_" + verb + "_" + name
	switch format {
	case FormatGoose:
		return newMigrationFS(migrationFile{name + ".sql", "-- +goose Up\n" + gooseStatements(up) +
			"\n-- +goose Down\n" + gooseStatements(down)}), nil
	case FormatGolangMigrate:
		return newMigrationFS(
			migrationFile{name + ".down.sql", script(down)},
			migrationFile{name + ".up.sql", script(up)},
		), nil
	case FormatSQL:
		return newMigrationFS(migrationFile{name + ".sql", script(up)}), nil
	}
	return nil, fmt.Errorf("sqlinbox: unknown migration format %q: use %s, %s or %s", format, FormatGoose, FormatGolangMigrate, FormatSQL)
}

// validateVersion accepts what both tools parse as a version: digits, at most 19 (an int64),
// not all zeros (goose starts at 1).
func validateVersion(version string) error {
	n, err := strconv.ParseInt(version, 10, 64)
	if err != nil || n <= 0 || strings.TrimLeft(version, "0123456789") != "" {
		return fmt.Errorf("sqlinbox: migration version %q: want 1 to 19 digits, not 0 (20261201150405, or 00042 in a sequence)", version)
	}
	return nil
}

// script joins statements as [SchemaSQL] does, each ended by ";" and a line break.
func script(statements []string) string { return strings.Join(statements, ";\n") + ";\n" }

// gooseStatements writes statements for goose's parser, which ends a statement at a line
// that ends with ";": a statement holding a ";" of its own goes between StatementBegin and
// StatementEnd.
func gooseStatements(statements []string) string {
	var b strings.Builder
	for _, s := range statements {
		if strings.Contains(s, ";") {
			b.WriteString("-- +goose StatementBegin\n" + s + ";\n-- +goose StatementEnd\n")
			continue
		}
		b.WriteString(s + ";\n")
	}
	return b.String()
}

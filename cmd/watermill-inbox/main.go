// Command watermill-inbox manages the table of a watermill-inbox inbox: it prints and
// creates the schema, checks that a table can guard against duplicates, deletes claims older
// than a retention, and shows what the table holds.
//
//	watermill-inbox schema  -dialect postgres -table inbox
//	watermill-inbox schema  -dialect postgres -table app.billing_inbox -format goose -out migrations
//	watermill-inbox migrate -dsn postgres://user@host/db
//	watermill-inbox check   -dsn postgres://user@host/db
//	watermill-inbox cleanup -dsn postgres://user@host/db -older-than 14d
//	watermill-inbox stats   -dsn 'mysql://user@tcp(host:3306)/db'
//
// The database comes from -dsn or the INBOX_DSN environment variable: postgres:// or
// postgresql:// URLs (pgx), mysql:// followed by a go-sql-driver/mysql DSN, sqlite:// followed
// by a file path, or file: URIs (modernc.org/sqlite). Give a DSN that holds a password in
// INBOX_DSN: a command line is visible to every user of the machine (ps). No output of the
// command shows a DSN's password. PostgreSQL is opened in pgx's exec
// mode unless the DSN sets default_query_exec_mode, so that every command works through a
// pooler in transaction mode. Without a scheme, name the dialect with
// -dialect. stats and cleanup refuse a SQLite file that does not exist (SQLite would create
// an empty one); migrate creates it.
//
// schema prints the DDL, or with -out writes the migration that creates the table (and its
// schema, if missing) into a folder, as the files of one migration tool (-format goose,
// golang-migrate or sql; see sqlinbox.MigrationFiles); with -upgrade, the migration that
// brings a table made by an earlier release up to date (sqlinbox.UpgradeFiles). The version
// is -version, else the time in UTC, else, if the folder holds that version or a later one,
// the one after its last; a version another migration of the folder has is refused. It
// refuses to replace a migration of the table the folder holds already, unless -force is
// given with that migration's -version, and writes each file under a temporary name first,
// then renames them all: a failure leaves no file behind.
//
// migrate and check refuse a table that cannot guard against duplicates (its primary key is
// not exactly (consumer, message_id), its key columns do not compare bytes exactly, a column
// is missing) and print why; stores refuse such a table too (sqlinbox.ErrTableMismatch).
// migrate also fails, and check warns, when the table has no index that starts with
// processed_at, by which cleanup finds the oldest claims.
//
// cleanup counts the claims to delete first, then shows its progress: a bar on a terminal;
// elsewhere (a log, cron mail) a line every 10 seconds (-progress-every) with the rows
// deleted, the rate and what is left; -progress none prints only the summary.
//
// An error is one line on stderr. Exit statuses:
//
//	0  done (also -h)
//	1  the command failed: no database or table, a table that cannot guard, a failed
//	   statement, interrupted
//	2  bad usage: unknown command, flag or dialect, a bad value, a malformed DSN
//	3  cleanup: another cleanup of the table holds its lock; nothing was deleted
//
// The command is package inboxcli with the dialects it ships; a build of one's own can add a
// dialect of its own there.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/inboxkit/watermill-inbox/cmd/watermill-inbox/inboxcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := inboxcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, inboxcli.Postgres(), inboxcli.MySQL(), inboxcli.SQLite())
	stop()
	os.Exit(code)
}

// Command watermill-inbox manages the table of a watermill-inbox inbox: it prints and
// creates the schema, checks that a table can guard against duplicates, deletes claims older
// than a retention, and shows what the table holds.
//
//	watermill-inbox schema  -dialect postgres -table inbox
//	watermill-inbox schema  -dialect postgres -table app.billing_inbox -format goose -out migrations
//	watermill-inbox migrate -dsn postgres://user@host/db
//	watermill-inbox check   -dsn postgres://user@host/db
//	watermill-inbox cleanup -dsn postgres://user@host/db -older-than 14d
//	watermill-inbox stats   -dsn 'mysql://user:pass@tcp(host:3306)/db'
//
// The database comes from -dsn or the INBOX_DSN environment variable: postgres:// or
// postgresql:// URLs (pgx), mysql:// followed by a go-sql-driver/mysql DSN, sqlite:// followed
// by a file path, or file: URIs (modernc.org/sqlite). Without a scheme, name the dialect with
// -dialect. stats and cleanup refuse a SQLite file that does not exist (SQLite would create
// an empty one); migrate creates it.
//
// schema prints the DDL, or with -out writes the migration that creates the table into a
// folder, as the files of one migration tool (-format goose, golang-migrate or sql; see
// sqlinbox.MigrationFiles), numbered with the time in UTC or -version. It refuses to
// replace a migration of the table the folder holds already, unless -force is given with
// that migration's -version, and writes each file under a temporary name first, then
// renames them all: a failure leaves no file behind.
//
// migrate and check refuse a table that cannot guard against duplicates (its primary key is
// not exactly (consumer, message_id), its key columns do not compare bytes exactly, a column
// is missing) and print why; stores refuse such a table too (sqlinbox.ErrTableMismatch).
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
//	2  bad usage: unknown command, flag or dialect, a bad value
//	3  cleanup: another cleanup of the table holds its lock; nothing was deleted
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// dsnVar is the environment variable that supplies the DSN when -dsn is not given.
const dsnVar = "INBOX_DSN"

const usage = `usage: watermill-inbox <command> [flags]

commands:
  schema    print the DDL that creates the inbox table and its processed_at index, or write
            it as a migration for goose or golang-migrate (-format, -out)
  migrate   create the inbox table and its index if they do not exist, then check it
  check     check that the inbox table can guard against duplicates (exit 1 and why if not)
  cleanup   delete claims older than -older-than, in batches
  stats     show claims per consumer, the oldest and newest claim, and the table's size

Run "watermill-inbox <command> -h" for the command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses. Scripts and cron jobs can rely on them; README.md and docs/operating.md
// list them too.
const (
	exitOK    = 0 // done; also -h
	exitFail  = 1 // the command failed: no database, no table, a table that cannot guard, a failed statement, interrupted
	exitUsage = 2 // bad command line: unknown command, flag or dialect, a bad value
	exitBusy  = 3 // cleanup only: another cleanup of the table holds its lock; nothing deleted
)

// usageError is bad input from the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run runs the command line args (without the program name) and returns the exit status.
// An error is printed once, on one line of stderr, after the program's name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, "watermill-inbox: "+oneLine(err))
	var u usageError
	switch {
	case errors.As(err, &u):
		return exitUsage
	case errors.Is(err, sqlinbox.ErrCleanupBusy):
		return exitBusy
	default:
		return exitFail
	}
}

// oneLine writes err's message on one line. Driver errors can span several, and pgx lists
// every connection attempt (TLS, then plain text, per address) on a line of its own, most
// often with the same error: each distinct line is kept once.
func oneLine(err error) string {
	var parts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		parts = append(parts, line)
	}
	return strings.Join(parts, " ")
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command: use schema, migrate, check, cleanup or stats (watermill-inbox help)")
	}
	name, args := args[0], args[1:]
	switch name {
	case "schema":
		return schemaCommand(args, stdout, stderr)
	case "migrate":
		return migrateCommand(ctx, args, stdout, stderr)
	case "check":
		return checkCommand(ctx, args, stdout, stderr)
	case "cleanup":
		return cleanupCommand(ctx, args, stdout, stderr)
	case "stats":
		return statsCommand(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usagef("unknown command %q: use schema, migrate, check, cleanup or stats", name)
	}
}

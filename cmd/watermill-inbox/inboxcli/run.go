package inboxcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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

// Exit statuses. Scripts and cron jobs can rely on them; README.md and docs/operating.md
// list them too.
const (
	exitOK    = 0 // done; also -h
	exitFail  = 1 // the command failed: no database, no table, a table that cannot guard, a failed statement, interrupted
	exitUsage = 2 // bad command line: unknown command, flag or dialect, a bad value, a malformed DSN
	exitBusy  = 3 // cleanup only: another cleanup of the table holds its lock; nothing deleted
)

// usageError is bad input from the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Main runs the watermill-inbox command line args (without the program's name) on the
// given dialects, writes its output to stdout and its one line of error to stderr, and
// returns the exit status: 0 done (also -h), 1 the command failed, 2 bad usage, 3 another
// cleanup of the table holds its lock (the watermill-inbox command lists them). ctx ends the command: a
// program cancels it on SIGINT and SIGTERM. The dialects are the databases the command
// knows: the -dialect values and DSN schemes they name, in the order given; the shipped
// command passes Postgres(), MySQL() and SQLite(). A Dialect without Dialect or Open, or two
// dialects of one name, is an error of the program: Main prints it and returns 2 (bad usage).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, dialects ...Dialect) int {
	ds, err := newDialects(dialects)
	if err != nil {
		fmt.Fprintln(stderr, "watermill-inbox: "+err.Error())
		return exitUsage
	}
	return (&cli{dialects: ds}).run(ctx, args, stdout, stderr)
}

// cli is one run of the command: the dialects it knows, and the one the command resolved.
type cli struct {
	dialects dialects
	resolved *Dialect
	dsn      string // the DSN the command resolved, whose passwords its error line never shows
}

// run runs the command line args and returns the exit status. An error is printed once, on
// one line of stderr, after the program's name, with the dialect's hint for it.
func (x *cli) run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := x.dispatch(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	hint := ""
	if x.resolved != nil {
		hint = x.resolved.hint(err)
	}
	fmt.Fprintln(stderr, "watermill-inbox: "+escapeControls(redact(oneLine(err), x.dsn))+hint)
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

// escapeControls writes each control character of line (ESC, BEL, C1 ...) and each byte that
// is not UTF-8 as its Go escape (\x1b, \a, \u0085, \xff): an error can quote what a table
// holds (a column's name, a value), which would otherwise drive the terminal.
func escapeControls(line string) string {
	if utf8.ValidString(line) && strings.IndexFunc(line, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return line
	}
	var b strings.Builder
	for len(line) > 0 {
		r, size := utf8.DecodeRuneInString(line)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, line[0])
		case unicode.IsPrint(r):
			b.WriteString(line[:size])
		default:
			quoted := strconv.QuoteRune(r)
			b.WriteString(quoted[1 : len(quoted)-1])
		}
		line = line[size:]
	}
	return b.String()
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

func (x *cli) dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command: use schema, migrate, check, cleanup or stats (watermill-inbox help)")
	}
	name, args := args[0], args[1:]
	switch name {
	case "schema":
		return x.schemaCommand(args, stdout, stderr)
	case "migrate":
		return x.migrateCommand(ctx, args, stdout, stderr)
	case "check":
		return x.checkCommand(ctx, args, stdout, stderr)
	case "cleanup":
		return x.cleanupCommand(ctx, args, stdout, stderr)
	case "stats":
		return x.statsCommand(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usagef("unknown command %q: use schema, migrate, check, cleanup or stats", name)
	}
}

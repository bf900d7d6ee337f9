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
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
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

// command is what every command starts from: a flag set with the target's flags (-dsn,
// -dialect, -table), to which the command adds its own.
type command struct {
	name string
	fs   *flag.FlagSet
	target
}

// newCommand returns a command whose flag set prints nothing itself: a bad flag is one line
// on stderr (from run), -h prints the flags (parse).
func newCommand(name string) *command {
	c := &command{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	c.fs.StringVar(&c.dsn, "dsn", "", "database `DSN`: postgres://..., mysql://user:pass@tcp(host:3306)/db, sqlite://path or file:path (default $"+dsnVar+")")
	c.fs.StringVar(&c.dialectName, "dialect", "", "SQL `dialect`: "+dialectNames()+" (default: from the DSN's scheme)")
	c.fs.StringVar(&c.table, "table", inbox.DefaultTable, "inbox `table`, optionally schema-qualified")
	return c
}

// parse parses args; -h prints the flags on stderr.
func (c *command) parse(args []string, stderr io.Writer) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "usage: watermill-inbox %s [flags]\n", c.name)
			c.fs.SetOutput(stderr)
			c.fs.PrintDefaults()
			return err
		}
		return usagef("%s: %w", c.name, err)
	}
	if c.fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", c.name, c.fs.Arg(0))
	}
	return nil
}

// inboxDB is an open database with a store on the command's table.
type inboxDB struct {
	db      *sql.DB
	dialect sqlinbox.Dialect
	store   *sqlinbox.Store
}

func (d *inboxDB) Close() error { return d.db.Close() }

// connect opens the target's database, checks that it answers and builds a store on the
// table. Unless the command creates the schema (creates), a SQLite file must exist already
// and so must the table.
func (c *command) connect(ctx context.Context, creates bool) (*inboxDB, error) {
	d, err := c.open(ctx, creates)
	if err != nil {
		return nil, err
	}
	if !creates {
		if err := d.checkTable(ctx, c.table); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// open is connect without the check that the table exists.
func (c *command) open(ctx context.Context, creates bool) (*inboxDB, error) {
	dialect, driver, dsn, err := c.resolve(true, creates)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open the %s database: %w", dialect.Name(), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the %s database: %w", dialect.Name(), err)
	}
	store, err := sqlinbox.NewDB(db, dialect, sqlinbox.Config{Table: c.table})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &inboxDB{db: db, dialect: dialect, store: store}, nil
}

// checkTable fails with a clear message when the inbox table does not exist.
func (d *inboxDB) checkTable(ctx context.Context, table string) error {
	parsed, err := d.dialect.ParseTable(table)
	quoted := parsed.Quoted
	if err != nil {
		return err
	}
	rows, err := d.db.QueryContext(ctx, "SELECT consumer, message_id, processed_at FROM "+quoted+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("inbox table %q is missing or unreadable (create it with \"watermill-inbox migrate\", "+
			"or with your migration tool from the files of \"watermill-inbox schema -format goose -out DIR\"): %w", table, err)
	}
	return rows.Close()
}

// target is the database and table a command works on.
type target struct {
	dsn, dialectName, table string
}

// opener is a dialect and how the command opens it.
type opener struct {
	// names are the -dialect values that select it; each is also a DSN scheme (name://).
	names []string
	// prefixes are other DSN prefixes that select it ("file:").
	prefixes []string
	dialect  sqlinbox.Dialect
	// driver is the database/sql driver; dsn turns a DSN as given into the driver's form.
	// creates: the command creates the schema (and may create the database with it).
	driver string
	dsn    func(dsn string, creates bool) (string, error)
}

// openers is the one table of the dialects the command knows, and of their names.
var openers = []opener{
	{[]string{"postgres", "postgresql"}, nil, sqlinbox.Postgres(), "pgx", func(dsn string, _ bool) (string, error) { return dsn, nil }},
	{[]string{"mysql", "mariadb"}, nil, sqlinbox.MySQL(), "mysql", mysqlDSN},
	{[]string{"sqlite", "sqlite3"}, []string{"file:"}, sqlinbox.SQLite(), "sqlite", sqliteDSN},
}

// lookup returns the opener that name (a -dialect value) selects.
func lookup(name string) (opener, bool) {
	for _, o := range openers {
		if slices.Contains(o.names, strings.ToLower(name)) {
			return o, true
		}
	}
	return opener{}, false
}

// schemeOf returns the opener a DSN's scheme selects.
func schemeOf(dsn string) (opener, bool) {
	lower := strings.ToLower(dsn)
	for _, o := range openers {
		for _, name := range o.names {
			if strings.HasPrefix(lower, name+"://") {
				return o, true
			}
		}
		for _, prefix := range o.prefixes {
			if strings.HasPrefix(lower, prefix) {
				return o, true
			}
		}
	}
	return opener{}, false
}

// dialectNames lists the first name of every dialect: "postgres, mysql or sqlite".
func dialectNames() string {
	var names []string
	for _, o := range openers {
		names = append(names, o.names[0])
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// resolve returns the dialect, the driver and the DSN in the driver's form. needDSN is false
// for schema, which only needs the dialect; creates is true for migrate.
func (t *target) resolve(needDSN, creates bool) (dialect sqlinbox.Dialect, driver, dsn string, err error) {
	if err := sqlinbox.ValidateTableName(t.table); err != nil {
		return dialect, "", "", usageError{fmt.Errorf("-table: %w", err)}
	}
	dsn = t.dsn
	if dsn == "" && (needDSN || t.dialectName == "") {
		dsn = os.Getenv(dsnVar)
	}
	fromScheme, hasScheme := schemeOf(dsn)
	var o opener
	switch {
	case t.dialectName != "":
		var ok bool
		if o, ok = lookup(t.dialectName); !ok {
			return dialect, "", "", usagef("unknown dialect %q: use %s", t.dialectName, dialectNames())
		}
		if hasScheme && fromScheme.dialect.Name() != o.dialect.Name() {
			return dialect, "", "", usagef("-dialect %s does not match the DSN's scheme, which names %s", t.dialectName, fromScheme.dialect)
		}
	case hasScheme:
		o = fromScheme
	case dsn == "":
		return dialect, "", "", usagef("no database: set -dsn or %s, or -dialect for schema", dsnVar)
	default:
		return dialect, "", "", usagef("cannot tell the dialect from the DSN: start it with postgres://, mysql:// or sqlite://, or set -dialect")
	}
	dialect = o.dialect
	// The dialect's own rules too: SQLite refuses a schema.
	if _, err := dialect.ParseTable(t.table); err != nil {
		return dialect, "", "", usageError{fmt.Errorf("-table: %w", err)}
	}
	if !needDSN {
		return dialect, "", "", nil
	}
	if dsn == "" {
		return dialect, "", "", usagef("no database: set -dsn or %s", dsnVar)
	}
	if dsn, err = o.dsn(dsn, creates); err != nil {
		return dialect, "", "", err
	}
	return dialect, o.driver, dsn, nil
}

// mysqlDSN turns mysql://DSN or mariadb://DSN into a go-sql-driver/mysql DSN.
func mysqlDSN(dsn string, _ bool) (string, error) {
	dsn = strings.TrimPrefix(dsn, "mysql://")
	dsn = strings.TrimPrefix(dsn, "mariadb://")
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("bad MySQL DSN (want mysql://user:password@tcp(host:3306)/database): %w", err)
	}
	return dsn, nil
}

// sqliteDSN turns sqlite://path, file:path or a bare path into a modernc.org/sqlite DSN with
// a busy timeout, so the cleanup waits for the service's writers instead of failing. SQLite
// creates a missing file on open: unless the command creates the schema, a file that does
// not exist is an error, so that a typo in the path does not leave an empty database behind.
func sqliteDSN(dsn string, creates bool) (string, error) {
	for _, prefix := range []string{"sqlite://", "sqlite3://"} {
		if strings.HasPrefix(strings.ToLower(dsn), prefix) {
			dsn = dsn[len(prefix):]
		}
	}
	dsn = strings.TrimPrefix(dsn, "file:")
	path, query, _ := strings.Cut(dsn, "?")
	inMemory := path == "" || path == ":memory:" || strings.Contains(query, "mode=memory")
	if !creates && !inMemory {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("SQLite database %s does not exist (create it with \"watermill-inbox migrate\")", path)
		}
	}
	dsn = "file:" + dsn
	if !strings.Contains(query, "busy_timeout") {
		sep := "?"
		if query != "" {
			sep = "&"
		}
		dsn += sep + "_pragma=busy_timeout(10000)"
	}
	return dsn, nil
}

func migrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("migrate")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, err := c.connect(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.store.InitializeSchema(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inbox table %q and its processed_at index are in place (%s) and it can guard against duplicates\n", c.table, d.dialect)
	return nil
}

// checkCommand reads the table's shape from the catalog: exit 0 if it can guard against
// duplicates, 1 with every reason if it cannot (a missing table among them), for CI
// pipelines and init containers.
func checkCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("check")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.store.CheckTable(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inbox table %q can guard against duplicates (%s)\n", c.table, d.dialect)
	return nil
}

// parseAge reads a retention: a Go duration ("72h", "90m") or whole days ("14d").
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, usagef("bad -older-than %q: want a positive number of days (14d) or a duration (336h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usagef("bad -older-than %q: want a positive duration (336h) or days (14d)", s)
	}
	return d, nil
}

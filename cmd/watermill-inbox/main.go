// Command watermill-inbox manages the table of a watermill-inbox inbox: it prints and
// creates the schema, deletes claims older than a retention, and shows what the table holds.
//
//	watermill-inbox schema  -dialect postgres -table inbox
//	watermill-inbox migrate -dsn postgres://user@host/db
//	watermill-inbox cleanup -dsn postgres://user@host/db -older-than 14d
//	watermill-inbox stats   -dsn 'mysql://user:pass@tcp(host:3306)/db'
//
// The database comes from -dsn or the INBOX_DSN environment variable: postgres:// or
// postgresql:// URLs (pgx), mysql:// followed by a go-sql-driver/mysql DSN, sqlite:// followed
// by a file path, or file: URIs (modernc.org/sqlite). Without a scheme, name the dialect with
// -dialect. The exit status is 0 on success, 1 when the command fails, 2 for bad usage; an
// error is one line on stderr.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
  schema    print the DDL that creates the inbox table and its processed_at index
  migrate   create the inbox table and its index if they do not exist
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

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// usageError is bad input from the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run runs the command line args (without the program name) and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	}
	// One line: driver errors sometimes span several.
	fmt.Fprintln(stderr, "watermill-inbox: "+strings.Join(strings.Fields(err.Error()), " "))
	var u usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitFail
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command: use schema, migrate, cleanup or stats (watermill-inbox help)")
	}
	command, args := args[0], args[1:]
	switch command {
	case "schema":
		return schemaCommand(args, stdout, stderr)
	case "migrate":
		return migrateCommand(ctx, args, stdout, stderr)
	case "cleanup":
		return cleanupCommand(ctx, args, stdout, stderr)
	case "stats":
		return statsCommand(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usagef("unknown command %q: use schema, migrate, cleanup or stats", command)
	}
}

// target is the database and table a command works on.
type target struct {
	dsn, dialectName, table string
}

func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.dsn, "dsn", "", "database `DSN`: postgres://..., mysql://user:pass@tcp(host:3306)/db, sqlite://path or file:path (default $"+dsnVar+")")
	fs.StringVar(&t.dialectName, "dialect", "", "SQL `dialect`: postgres, mysql or sqlite (default: from the DSN's scheme)")
	fs.StringVar(&t.table, "table", inbox.DefaultTable, "inbox `table`, optionally schema-qualified")
}

// newFlagSet returns a flag set that prints nothing itself: a bad flag is one line on stderr
// (from run), -h prints the flags (parse).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("watermill-inbox "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs; -h prints the flags on stderr.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			w := stderr
			fmt.Fprintf(w, "usage: %s [flags]\n", fs.Name())
			fs.SetOutput(w)
			fs.PrintDefaults()
			return err
		}
		return usagef("%s: %v", strings.TrimPrefix(fs.Name(), "watermill-inbox "), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// opener is a dialect and how the command opens it: the database/sql driver and the DSN
// in that driver's form.
type opener struct {
	dialect sqlinbox.Dialect
	driver  string
	dsn     func(dsn string) (string, error)
}

var (
	postgres = opener{sqlinbox.Postgres, "pgx", func(dsn string) (string, error) { return dsn, nil }}
	mysqlDB  = opener{sqlinbox.MySQL, "mysql", mysqlDSN}
	sqlite   = opener{sqlinbox.SQLite, "sqlite", func(dsn string) (string, error) { return sqliteDSN(dsn), nil }}
)

// openers maps every name -dialect accepts, and every DSN scheme, to its opener.
var openers = map[string]opener{
	"postgres":   postgres,
	"postgresql": postgres,
	"mysql":      mysqlDB,
	"mariadb":    mysqlDB,
	"sqlite":     sqlite,
	"sqlite3":    sqlite,
}

// resolve returns the dialect, the driver and the DSN in the driver's form. needDSN is false
// for schema, which only needs the dialect.
func (t *target) resolve(needDSN bool) (dialect sqlinbox.Dialect, driver, dsn string, err error) {
	if err := sqlinbox.ValidateTableName(t.table); err != nil {
		return dialect, "", "", usageError{strings.TrimPrefix(err.Error(), "inbox: ")}
	}
	dsn = t.dsn
	if dsn == "" && (needDSN || t.dialectName == "") {
		dsn = os.Getenv(dsnVar)
	}
	scheme := ""
	if dsn != "" {
		scheme, _ = schemeOf(dsn)
	}
	name := strings.ToLower(t.dialectName)
	if name == "" {
		name = scheme
	}
	switch {
	case name == "" && dsn == "":
		return dialect, "", "", usagef("no database: set -dsn or %s, or -dialect for schema", dsnVar)
	case name == "":
		return dialect, "", "", usagef("cannot tell the dialect from the DSN: start it with postgres://, mysql:// or sqlite://, or set -dialect")
	}
	db, ok := openers[name]
	if !ok {
		return dialect, "", "", usagef("unknown dialect %q: use postgres, mysql or sqlite", name)
	}
	dialect = db.dialect
	if scheme != "" && openers[scheme].dialect.Name != dialect.Name {
		return dialect, "", "", usagef("-dialect %s does not match the DSN's scheme %s", t.dialectName, scheme)
	}
	if !needDSN {
		return dialect, "", "", nil
	}
	if dsn == "" {
		return dialect, "", "", usagef("no database: set -dsn or %s", dsnVar)
	}
	if dsn, err = db.dsn(dsn); err != nil {
		return dialect, "", "", err
	}
	return dialect, db.driver, dsn, nil
}

// mysqlDSN turns mysql://DSN or mariadb://DSN into a go-sql-driver/mysql DSN.
func mysqlDSN(dsn string) (string, error) {
	dsn = strings.TrimPrefix(dsn, "mysql://")
	dsn = strings.TrimPrefix(dsn, "mariadb://")
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("bad MySQL DSN (want mysql://user:password@tcp(host:3306)/database): %w", err)
	}
	return dsn, nil
}

// schemeOf returns the openers name a DSN's scheme gives, name:// for every name there and
// file: for SQLite ("" if none or unknown).
func schemeOf(dsn string) (string, bool) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "file:") {
		return "sqlite", true
	}
	if scheme, _, ok := strings.Cut(lower, "://"); ok {
		if _, known := openers[scheme]; known {
			return scheme, true
		}
	}
	return "", false
}

// sqliteDSN turns sqlite://path, file:path or a bare path into a modernc.org/sqlite DSN with
// a busy timeout, so the cleanup waits for the service's writers instead of failing.
func sqliteDSN(dsn string) string {
	for _, prefix := range []string{"sqlite://", "sqlite3://"} {
		if strings.HasPrefix(strings.ToLower(dsn), prefix) {
			dsn = dsn[len(prefix):]
		}
	}
	if !strings.HasPrefix(dsn, "file:") {
		dsn = "file:" + dsn
	}
	if !strings.Contains(dsn, "busy_timeout") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "_pragma=busy_timeout(10000)"
	}
	return dsn
}

// open connects to the target's database and checks that it answers.
func (t *target) open(ctx context.Context) (*sql.DB, sqlinbox.Dialect, error) {
	dialect, driver, dsn, err := t.resolve(true)
	if err != nil {
		return nil, dialect, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, dialect, fmt.Errorf("open %s database: %w", dialect, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, dialect, fmt.Errorf("connect to the %s database: %w", dialect, err)
	}
	return db, dialect, nil
}

// checkTable fails with a clear message when the inbox table does not exist.
func checkTable(ctx context.Context, db *sql.DB, dialect sqlinbox.Dialect, table string) error {
	quoted, err := dialect.QuoteTable(table)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, "SELECT consumer, message_id, processed_at FROM "+quoted+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("inbox table %q is missing or unreadable (create it with \"watermill-inbox migrate\"): %w", table, err)
	}
	return rows.Close()
}

func schemaCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("schema")
	var t target
	t.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	dialect, _, _, err := t.resolve(false)
	if err != nil {
		return err
	}
	ddl, err := sqlinbox.SchemaSQL(dialect, t.table)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, ddl)
	return err
}

func migrateCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate")
	var t target
	t.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	db, dialect, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlinbox.New(db, dialect, sqlinbox.Config{Table: t.table})
	if err != nil {
		return err
	}
	if err := store.InitializeSchema(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "inbox table %q and its processed_at index are in place (%s)\n", t.table, dialect)
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

func cleanupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cleanup")
	var t target
	t.register(fs)
	olderThan := fs.String("older-than", "", "delete claims older than this `age`: a duration (336h) or days (14d); required")
	batchSize := fs.Int("batch-size", sqlinbox.DefaultCleanupBatchSize, "rows per DELETE, each its own transaction")
	pause := fs.Duration("pause", 0, "wait between batches, to leave the database to the claims")
	progressMode := fs.String("progress", "auto", "progress bar: auto (when stdout is a terminal), bar or none")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *olderThan == "" {
		return usagef("cleanup: -older-than is required (e.g. -older-than 14d)")
	}
	age, err := parseAge(*olderThan)
	if err != nil {
		return err
	}
	if *batchSize <= 0 {
		return usagef("cleanup: -batch-size must be positive")
	}
	var bar bool
	switch *progressMode {
	case "auto":
		bar = isTerminal(stdout)
	case "bar":
		bar = true
	case "none":
	default:
		return usagef("cleanup: -progress %q: use auto, bar or none", *progressMode)
	}
	db, dialect, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkTable(ctx, db, dialect, t.table); err != nil {
		return err
	}
	store, err := sqlinbox.New(db, dialect, sqlinbox.Config{Table: t.table})
	if err != nil {
		return err
	}
	config := sqlinbox.CleanupConfig{BatchSize: *batchSize, Pause: *pause}
	if bar {
		total, err := store.CountExpired(ctx, age)
		if err != nil {
			return err
		}
		p := &progressBar{w: stdout, total: total}
		config.Progress = p.update
		defer p.finish()
	}
	start := time.Now()
	var batches int
	progress := config.Progress
	config.Progress = func(p sqlinbox.CleanupProgress) {
		batches = p.Batches
		if progress != nil {
			progress(p)
		}
	}
	deleted, err := store.Cleanup(ctx, age, config)
	if err != nil {
		if deleted > 0 {
			return fmt.Errorf("deleted %d claims, then: %w", deleted, err)
		}
		return err
	}
	elapsed := time.Since(start)
	if bar {
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "deleted %d claims older than %s from %q in %d batches, %s (%.0f rows/s)\n",
		deleted, age, t.table, batches, elapsed.Round(time.Millisecond), float64(deleted)/max(elapsed.Seconds(), 1e-6))
	return nil
}

// isTerminal reports whether w is a character device (a terminal), where a progress bar can
// redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// progressBar redraws one line: a bar, the rows deleted of the rows expired at the start, and
// the rate. Claims that expire during the pass can take it past 100%; it is capped there.
type progressBar struct {
	w     io.Writer
	total int64
	last  sqlinbox.CleanupProgress
}

func (p *progressBar) update(progress sqlinbox.CleanupProgress) {
	p.last = progress
	const width = 30
	fraction := 1.0
	if p.total > 0 {
		fraction = min(float64(progress.Deleted)/float64(p.total), 1)
	}
	if progress.Done {
		fraction = 1
	}
	filled := int(fraction * width)
	rate := float64(progress.Deleted) / max(progress.Elapsed.Seconds(), 1e-6)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d rows, %.0f rows/s ",
		strings.Repeat("#", filled), strings.Repeat(" ", width-filled), fraction*100, progress.Deleted, p.total, rate)
}

// finish ends the bar's line when the pass stopped early.
func (p *progressBar) finish() {
	if !p.last.Done {
		fmt.Fprintln(p.w)
	}
}

package outsidedialect_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/integration/outsidedialect"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// database is one database the dialects run on: how to open it, and the dialect of one's
// own that speaks it.
type database struct {
	name    string
	dialect sqlinbox.Dialect
	driver  string
	dollar  bool
	// dsn returns the database's DSN in its driver's form; params, if any, are added.
	dsn func(t *testing.T, params string) string
	// commitFault returns a statement that, run in the inbox transaction (on r, the
	// transaction; direct outside it), makes its COMMIT fail.
	commitFault func(t *testing.T, direct *sql.DB) (name string, fault func(ctx context.Context, r inboxtest.Runner) error, queued string)
	// twoHoursAgo is an SQL expression of the time two hours ago, as processed_at holds it.
	twoHoursAgo string
	// retriable: the database's ways of resolving a race between copies with an error.
	retriable func(err error) bool
}

func addParams(dsn, params string) string {
	if params == "" {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

var databases = []database{
	{
		name: "postgres", dialect: outsidedialect.Postgres{}, driver: "pgx", dollar: true,
		dsn: func(t *testing.T, params string) string { return addParams(testenv.PostgresURL(t), params) },
		commitFault: func(t *testing.T, direct *sql.DB) (string, func(context.Context, inboxtest.Runner) error, string) {
			faults := testenv.Name("faults")
			mustExec(t, direct, "CREATE TABLE "+faults+" (v int, CONSTRAINT "+faults+"_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)")
			dropLater(t, direct, faults)
			violate := "INSERT INTO " + faults + " (v) VALUES (1), (1)"
			return "deferred constraint fails at COMMIT", func(ctx context.Context, r inboxtest.Runner) error { return r.Exec(ctx, violate) }, violate
		},
		twoHoursAgo: "now() - interval '2 hours'",
		retriable:   func(error) bool { return false },
	},
	{
		name: "mysql", dialect: outsidedialect.MySQL{}, driver: "mysql",
		dsn: func(t *testing.T, params string) string { return addParams(testenv.MySQLDSN(t), params) },
		commitFault: func(t *testing.T, direct *sql.DB) (string, func(context.Context, inboxtest.Runner) error, string) {
			return "connection killed before COMMIT", func(ctx context.Context, r inboxtest.Runner) error {
				id, err := r.Count(ctx, "SELECT CONNECTION_ID()")
				if err != nil {
					return err
				}
				_, err = direct.ExecContext(ctx, "KILL "+strconv.Itoa(id))
				return err
			}, ""
		},
		twoHoursAgo: "UTC_TIMESTAMP(6) - INTERVAL 2 HOUR",
		// InnoDB resolves some races between copies of one key with a deadlock or a lock
		// wait timeout.
		retriable: func(err error) bool {
			return strings.Contains(err.Error(), "Error 1213") || strings.Contains(err.Error(), "Error 1205")
		},
	},
	{
		name: "sqlite", dialect: outsidedialect.SQLite{}, driver: "sqlite",
		dsn: func(t *testing.T, params string) string {
			path := filepath.Join(t.TempDir(), "inbox.db")
			return addParams("file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)", params)
		},
		commitFault: func(t *testing.T, direct *sql.DB) (string, func(context.Context, inboxtest.Runner) error, string) {
			parent, child := testenv.Name("parent"), testenv.Name("child")
			mustExec(t, direct, "CREATE TABLE "+parent+" (id INTEGER PRIMARY KEY)")
			mustExec(t, direct, "CREATE TABLE "+child+" (pid INTEGER REFERENCES "+parent+"(id) DEFERRABLE INITIALLY DEFERRED)")
			dropLater(t, direct, child, parent)
			violate := "INSERT INTO " + child + " (pid) VALUES (42)"
			return "deferred foreign key fails at COMMIT", func(ctx context.Context, r inboxtest.Runner) error { return r.Exec(ctx, violate) }, violate
		},
		twoHoursAgo: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 hours')",
		retriable:   func(err error) bool { return strings.Contains(err.Error(), "SQLITE_BUSY") },
	},
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func dropLater(t *testing.T, db *sql.DB, tables ...string) {
	t.Cleanup(func() {
		for _, table := range tables {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table)
		}
	})
}

// harness builds the conformance suite's harness for d: a store of d's dialect through
// sqlinbox.NewDB, on a new inbox table it created.
func (d database) harness(t *testing.T) *inboxtest.Harness {
	ctx := context.Background()
	db := open(t, d.driver, d.dsn(t, ""))
	table, business := testenv.Name("inbox"), testenv.Name("invoices")
	dropLater(t, db, table, business)
	store, err := sqlinbox.NewDB(db, d.dialect, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "CREATE TABLE "+business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")
	name, fault, queued := d.commitFault(t, db)
	h := &inboxtest.Harness{
		Store:    store,
		Table:    table,
		Business: business,
		Direct:   runner{db, d.dollar},
		InTx: func(ctx context.Context) (inboxtest.Runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return runner{tx, d.dollar}, ok
		},
		NewStore: func(table string) (inbox.Store, error) {
			return sqlinbox.NewDB(db, d.dialect, sqlinbox.Config{Table: table})
		},
		CommitFaults: map[string]func(ctx context.Context) error{
			name: func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](ctx)
				return fault(ctx, runner{tx, d.dollar})
			},
		},
		Retriable: func(err error) bool { return store.IsTransient(err) || d.retriable(err) },
	}
	if d.dollar {
		h.Placeholders = inboxtest.DollarPlaceholders
	}
	if queued != "" {
		h.QueuedCommitFaults = map[string]inbox.Statement{name: {SQL: queued}}
	}
	return h
}

// runner runs the suite's SQL on a *sql.DB or a *sql.Tx.
type runner struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	dollar bool
}

func (r runner) rebind(query string) string {
	if r.dollar {
		return inboxtest.DollarPlaceholders(query)
	}
	return query
}

func (r runner) Exec(ctx context.Context, query string, args ...any) error {
	_, err := r.q.ExecContext(ctx, r.rebind(query), args...)
	return err
}

func (r runner) Count(ctx context.Context, query string, args ...any) (n int, err error) {
	err = r.q.QueryRowContext(ctx, r.rebind(query), args...).Scan(&n)
	return n, err
}

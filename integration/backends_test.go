package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// runner runs the suite's own SQL, written with ? placeholders, on a pool or inside the
// handler's transaction.
type runner interface {
	exec(ctx context.Context, query string, args ...any) error
	count(ctx context.Context, query string, args ...any) (int, error)
}

// backend is one store under test and what the suite needs around it.
type backend struct {
	store inbox.Store
	// table is the inbox table; business the table the handlers write to.
	table, business string
	// direct reaches the database outside any inbox transaction, and never through the
	// proxy that outage cuts.
	direct runner
	// inTx reaches the database through the transaction in a handler's context.
	inTx func(ctx context.Context) (runner, bool)
	// newStore builds another store on the same database (and proxy).
	newStore func(config sqlinbox.Config) (inbox.Store, error)
	// commitFaults, called inside a handler, each make the coming COMMIT fail;
	// queuedCommitFaults do when queued with inbox.ExecAtCommit (written with ?).
	commitFaults       map[string]func(ctx context.Context) error
	queuedCommitFaults map[string]inbox.Statement
	// outage makes the database unavailable to the store until restore is called.
	outage func() (restore func())
	// placeholders rewrites a statement written with ? for the driver.
	placeholders func(string) string
	// dialect is the store's SQL; retentionSQL the tests' own SQL that ages claims.
	dialect      sqlinbox.Dialect
	retentionSQL retentionSQL
	// retriable says whether a delivery error is the kind a redelivery fixes (deadlock,
	// lock timeout, busy database); the suite counts them.
	retriable func(error) bool
	// driver and dsn open the database directly (not through the proxy), for a tool that
	// opens connections of its own.
	driver, dsn string
}

type newBackend func(t *testing.T) *backend

var backends = map[string]newBackend{
	"pgx/postgres":          pgxBackend,
	"database-sql/postgres": stdlibPostgresBackend,
	"database-sql/mariadb":  mysqlBackend,
	// sqlinbox.NewMultiStatement: a write-behind message is one multi-statement request;
	// claim-first begins in the claim's request and commits in the queued statements'.
	"database-sql/mariadb/multi-statements": func(t *testing.T) *backend {
		return mysqlBackendWith(t, "multiStatements=true", true)
	},
	"database-sql/sqlite": sqliteBackend,
}

func pgxBackend(t *testing.T) *backend { return pgxBackendWith(t) }

// pgxBackendWith is pgxBackend with the store's pool configured by configure.
func pgxBackendWith(t *testing.T, configure ...func(*pgxpool.Config)) *backend {
	return pgxBackendAt(t, testenv.PostgresURL(t), configure...)
}

// pgxBackendAt is pgxBackendWith with the store reaching PostgreSQL at storeURL (through
// the proxy that outage cuts), such as a pooler's; direct still reaches it directly.
func pgxBackendAt(t *testing.T, storeURL string, configure ...func(*pgxpool.Config)) *backend {
	return pgxBackendOn(t, testenv.PostgresURL(t), storeURL, configure...)
}

// pgxBackendOn is pgxBackendAt with direct reaching directURL: a server of the test's own,
// which it may stop.
func pgxBackendOn(t *testing.T, directURL, storeURL string, configure ...func(*pgxpool.Config)) *backend {
	ctx := context.Background()
	proxy := startProxy(t, hostOf(t, storeURL))
	direct := openPgxPool(t, directURL)
	proxied := openPgxPool(t, withHost(t, storeURL, proxy.Addr()), configure...)

	table := testenv.Name("inbox")
	store, err := sqlinbox.NewPgx(proxied, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{
		store:  store,
		table:  table,
		direct: pgxRunner{direct},
		inTx: func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			return pgxRunner{tx}, ok
		},
		newStore: func(config sqlinbox.Config) (inbox.Store, error) {
			return sqlinbox.NewPgx(proxied, config)
		},
		outage:       func() func() { proxy.Cut(); return proxy.Restore },
		retriable:    func(error) bool { return false },
		placeholders: inboxtest.DollarPlaceholders,
		dialect:      sqlinbox.Postgres{},
		retentionSQL: postgresRetentionSQL,
		driver:       "pgx",
		dsn:          directURL,
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	postgresFaults(t, b)
	createBusinessTable(t, b)
	return b
}

func stdlibPostgresBackend(t *testing.T) *backend {
	return stdlibPostgresBackendAt(t, testenv.PostgresURL(t))
}

// stdlibPostgresBackendAt is stdlibPostgresBackend with the store reaching PostgreSQL at
// storeURL (through the proxy that outage cuts); direct still reaches it directly.
func stdlibPostgresBackendAt(t *testing.T, storeURL string) *backend {
	ctx := context.Background()
	directURL := testenv.PostgresURL(t)
	proxy := startProxy(t, hostOf(t, storeURL))
	direct := openSQL(t, "pgx", directURL)
	proxied := openSQL(t, "pgx", withHost(t, storeURL, proxy.Addr()))

	b := sqlBackend(t, plainStores(proxied, sqlinbox.Postgres{}), direct, sqlinbox.Postgres{})
	b.driver, b.dsn = "pgx", directURL
	b.retentionSQL = postgresRetentionSQL
	b.outage = func() func() { proxy.Cut(); return proxy.Restore }
	b.retriable = func(error) bool { return false }
	if err := b.store.(*sqlinbox.Store).InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	postgresFaults(t, b)
	createBusinessTable(t, b)
	return b
}

func mysqlBackend(t *testing.T) *backend { return mysqlBackendWith(t, "", false) }

// mysqlBackendWith adds params, if any, to the DSN's parameters; multiStatement makes its
// stores with sqlinbox.NewMultiStatement.
func mysqlBackendWith(t *testing.T, params string, multiStatement bool) *backend {
	if multiStatement {
		return mysqlBackendOf(t, params, multiStatementStores)
	}
	return mysqlBackendOf(t, params, nil)
}

// mysqlBackendOf is mysqlBackendWith with its stores made by stores on the DSN through the
// proxy that outage cuts; nil: sqlinbox.NewDB's.
func mysqlBackendOf(t *testing.T, params string, stores func(t *testing.T, dsn string) storeMaker) *backend {
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	if params != "" {
		if strings.Contains(dsn, "?") {
			dsn += "&" + params
		} else {
			dsn += "?" + params
		}
	}
	start, end := strings.Index(dsn, "tcp("), strings.Index(dsn, ")/")
	if start < 0 || end < 0 {
		t.Fatalf("MySQL DSN %q: want the form user@tcp(host:port)/db", dsn)
	}
	proxy := startProxy(t, dsn[start+4:end])
	direct := openSQL(t, "mysql", dsn)
	proxiedDSN := dsn[:start+4] + proxy.Addr() + dsn[end:]
	newStore := plainStores(openSQL(t, "mysql", proxiedDSN), sqlinbox.MySQL{})
	if stores != nil {
		newStore = stores(t, proxiedDSN)
	}

	b := sqlBackend(t, newStore, direct, sqlinbox.MySQL{})
	b.driver, b.dsn = "mysql", dsn
	b.retentionSQL = mysqlRetentionSQL
	b.outage = func() func() { proxy.Cut(); return proxy.Restore }
	// InnoDB resolves some races between copies of one key with a deadlock error or a
	// lock wait timeout; the claim fails, the message is nacked and redelivered.
	b.retriable = func(err error) bool {
		s := err.Error()
		return strings.Contains(s, "Error 1213") || strings.Contains(s, "Error 1205")
	}
	if err := b.store.(schemaStore).InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	b.commitFaults = map[string]func(ctx context.Context) error{
		"connection killed before COMMIT": func(ctx context.Context) error {
			r, _ := b.inTx(ctx)
			id, err := r.count(ctx, "SELECT CONNECTION_ID()")
			if err != nil {
				return err
			}
			return b.direct.exec(ctx, "KILL "+strconv.Itoa(id))
		},
	}
	createBusinessTable(t, b)
	return b
}

func sqliteBackend(t *testing.T) *backend {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "inbox.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)"
	db := openSQL(t, "sqlite", dsn)

	b := sqlBackend(t, plainStores(db, sqlinbox.SQLite{}), db, sqlinbox.SQLite{})
	b.driver, b.dsn = "sqlite", dsn
	b.retentionSQL = sqliteRetentionSQL
	// SQLite has no server to lose: its outage is another writer holding the lock.
	b.outage = func() func() {
		lock := openSQL(t, "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		conn, err := lock.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
			t.Fatal(err)
		}
		return func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
		}
	}
	b.retriable = func(err error) bool { return strings.Contains(err.Error(), "SQLITE_BUSY") }
	if err := b.store.(*sqlinbox.Store).InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	createBusinessTable(t, b)
	parent, child := b.business+"_parent", b.business+"_child"
	mustExec(t, b.direct, "CREATE TABLE "+parent+" (id INTEGER PRIMARY KEY)")
	mustExec(t, b.direct, "CREATE TABLE "+child+" (pid INTEGER REFERENCES "+parent+"(id) DEFERRABLE INITIALLY DEFERRED)")
	b.queuedCommitFaults = map[string]inbox.Statement{
		"deferred foreign key fails at COMMIT": {SQL: "INSERT INTO " + child + " (pid) VALUES (42)"},
	}
	b.commitFaults = map[string]func(ctx context.Context) error{
		"deferred foreign key fails at COMMIT": func(ctx context.Context) error {
			r, _ := b.inTx(ctx)
			return r.exec(ctx, "INSERT INTO "+child+" (pid) VALUES (42)")
		},
	}
	return b
}

// storeMaker builds a store on a backend's database, on config's table.
type storeMaker func(config sqlinbox.Config) (inbox.Store, error)

// schemaStore is a store that creates its table.
type schemaStore interface {
	InitializeSchema(ctx context.Context) error
}

// plainStores makes stores with sqlinbox.NewDB on db.
func plainStores(db *sql.DB, dialect sqlinbox.Dialect) storeMaker {
	return func(config sqlinbox.Config) (inbox.Store, error) { return sqlinbox.NewDB(db, dialect, config) }
}

// multiStatementStores makes stores with sqlinbox.NewMultiStatement, each on a pool of its
// own to dsn, closed when the test ends.
func multiStatementStores(t *testing.T, dsn string) storeMaker {
	connector := mysqlConnector(t, dsn)
	return func(config sqlinbox.Config) (inbox.Store, error) {
		store, db, err := sqlinbox.NewMultiStatement(connector, sqlinbox.MySQL{}, config)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(16)
		t.Cleanup(func() { db.Close() })
		return store, nil
	}
}

// sqlBackend builds a database/sql backend whose stores newStore makes.
func sqlBackend(t *testing.T, newStore storeMaker, direct *sql.DB, dialect sqlinbox.Dialect) *backend {
	table := testenv.Name("inbox")
	store, err := newStore(sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	dollar := dialect.Name() == (sqlinbox.Postgres{}).Name()
	placeholders := func(query string) string { return query }
	if dollar {
		placeholders = inboxtest.DollarPlaceholders
	}
	return &backend{
		placeholders: placeholders,
		dialect:      dialect,
		store:        store,
		table:        table,
		direct:       sqlRunner{direct, dollar},
		inTx: func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return sqlRunner{tx, dollar}, ok
		},
		newStore: newStore,
	}
}

// postgresFaults: a deferred unique constraint that fails only at COMMIT, and a backend
// terminated by the server before COMMIT.
func postgresFaults(t *testing.T, b *backend) {
	faults := testenv.Name("faults")
	mustExec(t, b.direct, "CREATE TABLE "+faults+" (v int, CONSTRAINT "+faults+"_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)")
	t.Cleanup(func() { _ = b.direct.exec(context.Background(), "DROP TABLE "+faults) })
	b.queuedCommitFaults = map[string]inbox.Statement{
		"deferred constraint fails at COMMIT": {SQL: "INSERT INTO " + faults + " (v) VALUES (1), (1)"},
	}
	b.commitFaults = map[string]func(ctx context.Context) error{
		"deferred constraint fails at COMMIT": func(ctx context.Context) error {
			r, _ := b.inTx(ctx)
			return r.exec(ctx, "INSERT INTO "+faults+" (v) VALUES (1), (1)")
		},
		"connection terminated before COMMIT": func(ctx context.Context) error {
			r, _ := b.inTx(ctx)
			pid, err := r.count(ctx, "SELECT pg_backend_pid()")
			if err != nil {
				return err
			}
			// The timeout makes pg_terminate_backend wait until the backend is gone.
			return b.direct.exec(ctx, "SELECT pg_terminate_backend(?, 5000)", pid)
		},
	}
}

// createBusinessTable creates the table handlers write to. It has no unique key, so a
// message processed twice shows up as two rows.
func createBusinessTable(t *testing.T, b *backend) {
	b.business = testenv.Name("invoices")
	mustExec(t, b.direct, "CREATE TABLE "+b.business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")
	t.Cleanup(func() {
		ctx := context.Background()
		for _, table := range []string{b.business, b.business + "_child", b.business + "_parent", b.business + "_pk", b.table} {
			_ = b.direct.exec(ctx, "DROP TABLE IF EXISTS "+table)
		}
	})
}

func mustExec(t *testing.T, r runner, query string) {
	t.Helper()
	if err := r.exec(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// pgxRunner works on a *pgxpool.Pool and on a pgx.Tx.
type pgxRunner struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (r pgxRunner) exec(ctx context.Context, query string, args ...any) error {
	_, err := r.q.Exec(ctx, inboxtest.DollarPlaceholders(query), args...)
	return err
}

func (r pgxRunner) count(ctx context.Context, query string, args ...any) (n int, err error) {
	err = r.q.QueryRow(ctx, inboxtest.DollarPlaceholders(query), args...).Scan(&n)
	return n, err
}

// sqlRunner works on a *sql.DB and on a *sql.Tx.
type sqlRunner struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	dollar bool
}

func (r sqlRunner) rebind(query string) string {
	if r.dollar {
		return inboxtest.DollarPlaceholders(query)
	}
	return query
}

func (r sqlRunner) exec(ctx context.Context, query string, args ...any) error {
	_, err := r.q.ExecContext(ctx, r.rebind(query), args...)
	return err
}

func (r sqlRunner) count(ctx context.Context, query string, args ...any) (n int, err error) {
	err = r.q.QueryRowContext(ctx, r.rebind(query), args...).Scan(&n)
	return n, err
}

// openPgxPool opens a pool of 16 connections, closed when the test ends; configure, if
// given, changes its configuration first.
func openPgxPool(t *testing.T, url string, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	config.MaxConns = 16
	for _, c := range configure {
		c(config)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func openSQL(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	db.SetConnMaxIdleTime(time.Minute)
	t.Cleanup(func() { db.Close() })
	return db
}

// mysqlConnector is go-sql-driver/mysql's connector to dsn.
func mysqlConnector(t *testing.T, dsn string) driver.Connector {
	t.Helper()
	config, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(config)
	if err != nil {
		t.Fatal(err)
	}
	return connector
}

func hostOf(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5432"
	}
	return u.Host
}

func withHost(t *testing.T, rawURL, host string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = host
	return u.String()
}

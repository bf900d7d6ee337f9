package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Each failure of the database that is not the message's, produced for real on the database
// that produces it: the store reports it transient (Store.IsTransient), and the inbox
// middleware's error for it is not poisonous, so that the recommended stack retries it
// instead of poisoning the message.

// transientStore is a store made for one case, and how its handlers reach the transaction.
type transientStore struct {
	store *sqlinbox.Store
	table string
	inTx  func(ctx context.Context) (runner, bool)
}

// deliver runs msg once through the inbox middleware of s around h and returns its error.
func (s transientStore) deliver(t *testing.T, msg *message.Message, h func(msg *message.Message, tx runner) error) error {
	t.Helper()
	mw, err := inbox.NewMiddleware(s.store, inbox.Config{Consumer: "billing"}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := s.inTx(msg.Context())
		if !ok {
			return nil, errors.New("no inbox transaction in the handler's context")
		}
		return nil, h(msg, tx)
	})(msg)
	return err
}

// wantTransient checks that err, the middleware's error for one delivery, is what the case
// produces (is), that the store and, where the database said so (dialect not nil), the
// dialect report it transient, and that it is not poisonous.
func wantTransient(t *testing.T, store *sqlinbox.Store, dialect sqlinbox.Dialect, err error, what string, is func(error) bool) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: the delivery succeeded", what)
	case !is(err):
		t.Fatalf("%s: the delivery failed with %v, not the error the case produces", what, err)
	}
	if !store.IsTransient(err) {
		t.Errorf("%s: Store.IsTransient(%v) = false", what, err)
	}
	if dialect != nil && !dialect.IsTransient(err) {
		t.Errorf("%s: the dialect's IsTransient(%v) = false", what, err)
	}
	if inbox.Poisonous(err) {
		t.Errorf("%s: the middleware's error %v is poisonous", what, err)
	}
	t.Logf("%s: %v", what, err)
}

func pgCode(code string) func(error) bool {
	return func(err error) bool {
		var e *pgconn.PgError
		return errors.As(err, &e) && e.Code == code
	}
}

func mysqlNumber(number uint16) func(error) bool {
	return func(err error) bool { return mysqlErrorNumber(err) == number }
}

// transientDB is a database of the error-class cases.
type transientDB struct {
	name    string
	dialect sqlinbox.Dialect
	// open makes a store of a new inbox table (created) on the shared server, with config's
	// LockTimeout; direct reaches the same server.
	open func(t *testing.T, config sqlinbox.Config) (transientStore, runner)
	// hold begins a transaction of its own that takes the row lock of id in table, and
	// returns its rollback.
	hold func(t *testing.T, table string, id int) (release func())
	// refused makes a store on a port nobody listens on.
	refused func(t *testing.T, port int) *sqlinbox.Store
	// exhausted makes a store on a pool of one connection, and takes that connection until
	// the test ends.
	exhausted func(t *testing.T) transientStore
	// refusedBy is the connection's refusal as the driver reports it.
	refusedBy func(error) bool
	deadlock  func(error) bool
	lockWait  func(error) bool
}

var transientDBs = []transientDB{
	{
		name: "postgres", dialect: sqlinbox.Postgres{},
		open: func(t *testing.T, config sqlinbox.Config) (transientStore, runner) {
			return pgxTransientStore(t, openPgxPool(t, testenv.PostgresURL(t)), config), pgxRunner{openPgxPool(t, testenv.PostgresURL(t))}
		},
		hold: func(t *testing.T, table string, id int) func() {
			tx, err := openPgxPool(t, testenv.PostgresURL(t)).Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(context.Background(), "UPDATE "+table+" SET n = n + 1 WHERE id = $1", id); err != nil {
				t.Fatal(err)
			}
			return func() { _ = tx.Rollback(context.Background()) }
		},
		refused: func(t *testing.T, port int) *sqlinbox.Store {
			return pgxTransientStore(t, openPgxPool(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(port)+"/test?sslmode=disable"),
				sqlinbox.Config{Table: testenv.Name("inbox")}).store
		},
		exhausted: func(t *testing.T) transientStore {
			pool := openPgxPool(t, testenv.PostgresURL(t), func(c *pgxpool.Config) { c.MaxConns = 1 })
			s := pgxTransientStore(t, pool, sqlinbox.Config{})
			conn, err := pool.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Release)
			return s
		},
		refusedBy: func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) },
		deadlock:  pgCode("40P01"),
		lockWait:  pgCode("55P03"),
	},
	{
		name: "mariadb", dialect: sqlinbox.MySQL{},
		open: func(t *testing.T, config sqlinbox.Config) (transientStore, runner) {
			dsn := testenv.MySQLDSN(t)
			return sqlTransientStore(t, openSQL(t, "mysql", dsn), sqlinbox.MySQL{}, config), sqlRunner{openSQL(t, "mysql", dsn), false}
		},
		hold: func(t *testing.T, table string, id int) func() {
			tx, err := openSQL(t, "mysql", testenv.MySQLDSN(t)).BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("UPDATE "+table+" SET n = n + 1 WHERE id = ?", id); err != nil {
				t.Fatal(err)
			}
			return func() { _ = tx.Rollback() }
		},
		refused: func(t *testing.T, port int) *sqlinbox.Store {
			return sqlTransientStore(t, openSQL(t, "mysql", "root@tcp(127.0.0.1:"+strconv.Itoa(port)+")/test"), sqlinbox.MySQL{},
				sqlinbox.Config{Table: testenv.Name("inbox")}).store
		},
		exhausted: func(t *testing.T) transientStore {
			db := openSQL(t, "mysql", testenv.MySQLDSN(t))
			db.SetMaxOpenConns(1)
			s := sqlTransientStore(t, db, sqlinbox.MySQL{}, sqlinbox.Config{})
			conn, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return s
		},
		refusedBy: func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) },
		deadlock:  mysqlNumber(errDeadlock),
		lockWait:  mysqlNumber(errLockWaitTimeout),
	},
}

// pgxTransientStore makes a pgx store on pool; with a table in config it is only built, else
// a new table is created and dropped when t ends.
func pgxTransientStore(t *testing.T, pool *pgxpool.Pool, config sqlinbox.Config) transientStore {
	t.Helper()
	create := config.Table == ""
	if create {
		config.Table = testenv.Name("inbox")
	}
	store, err := sqlinbox.NewPgx(pool, config)
	if err != nil {
		t.Fatal(err)
	}
	s := transientStore{store: store, table: config.Table, inTx: func(ctx context.Context) (runner, bool) {
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		return pgxRunner{tx}, ok
	}}
	if create {
		createTransientTable(t, s, pgxRunner{pool})
	}
	return s
}

// sqlTransientStore is pgxTransientStore for a database/sql store.
func sqlTransientStore(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, config sqlinbox.Config) transientStore {
	t.Helper()
	create := config.Table == ""
	if create {
		config.Table = testenv.Name("inbox")
	}
	store, err := sqlinbox.NewDB(db, dialect, config)
	if err != nil {
		t.Fatal(err)
	}
	dollar := dialect.Name() == (sqlinbox.Postgres{}).Name()
	s := transientStore{store: store, table: config.Table, inTx: func(ctx context.Context) (runner, bool) {
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		return sqlRunner{tx, dollar}, ok
	}}
	if create {
		createTransientTable(t, s, sqlRunner{db, dollar})
	}
	return s
}

func createTransientTable(t *testing.T, s transientStore, direct runner) {
	t.Helper()
	if err := s.store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.exec(context.Background(), "DROP TABLE IF EXISTS "+s.table) })
}

// lockRows creates a table of rows 1 and 2 that handlers lock, dropped when t ends.
func lockRows(t *testing.T, direct runner) string {
	t.Helper()
	table := testenv.Name("locks")
	mustExec(t, direct, "CREATE TABLE "+table+" (id INT PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, direct, "INSERT INTO "+table+" (id, n) VALUES (1, 0), (2, 0)")
	t.Cleanup(func() { _ = direct.exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return table
}

// closedPort returns a port of 127.0.0.1 that nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func newOrder() *message.Message {
	order := watermill.NewUUID()
	return message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order))
}

// On the shared PostgreSQL and MariaDB: a deadlock between two handlers' transactions, a
// handler's statement that waits for a lock past Config.LockTimeout, a connection refused
// (a port nobody listens on) and a pool exhausted until the message's deadline.
func TestTransientFailuresAreNotPoison(t *testing.T) {
	t.Parallel()
	for _, db := range transientDBs {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			t.Run("deadlock", func(t *testing.T) {
				s, direct := db.open(t, sqlinbox.Config{})
				locks := lockRows(t, direct)
				// Each handler locks its row, waits until the other has locked its own, then
				// asks for the other's: the database ends the cycle by failing one of them.
				locked := []chan struct{}{make(chan struct{}), make(chan struct{})}
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i := range 2 {
					wg.Go(func() {
						errs[i] = s.deliver(t, newOrder(), func(msg *message.Message, tx runner) error {
							if err := tx.exec(msg.Context(), "UPDATE "+locks+" SET n = n + 1 WHERE id = ?", i+1); err != nil {
								return err
							}
							close(locked[i])
							<-locked[1-i]
							return tx.exec(msg.Context(), "UPDATE "+locks+" SET n = n + 1 WHERE id = ?", 2-i)
						})
					})
				}
				wg.Wait()
				failed := errs[0]
				if failed == nil {
					failed = errs[1]
				} else if errs[1] != nil {
					t.Errorf("both deliveries failed: %v; %v", errs[0], errs[1])
				}
				wantTransient(t, s.store, db.dialect, failed, "deadlock", db.deadlock)
			})
			t.Run("lock timeout", func(t *testing.T) {
				s, direct := db.open(t, sqlinbox.Config{LockTimeout: 200 * time.Millisecond})
				locks := lockRows(t, direct)
				release := db.hold(t, locks, 1)
				defer release()
				err := s.deliver(t, newOrder(), func(msg *message.Message, tx runner) error {
					return tx.exec(msg.Context(), "UPDATE "+locks+" SET n = n + 1 WHERE id = 1")
				})
				wantTransient(t, s.store, db.dialect, err, "lock timeout", db.lockWait)
			})
			t.Run("connection refused", func(t *testing.T) {
				store := db.refused(t, closedPort(t))
				err := transientStore{store: store}.deliver(t, newOrder(), func(*message.Message, runner) error { return nil })
				wantTransient(t, store, nil, err, "connection refused", db.refusedBy)
			})
			t.Run("pool exhausted", func(t *testing.T) {
				s := db.exhausted(t)
				msgCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				msg := newOrder()
				msg.SetContext(msgCtx)
				err := s.deliver(t, msg, func(*message.Message, runner) error { return nil })
				// database/sql's store begins on a context of its own that ends with the message's,
				// cancelled rather than past its deadline.
				wantTransient(t, s.store, nil, err, "pool exhausted", func(err error) bool {
					return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
				})
			})
		})
	}
}

// A server that takes no writes: a PostgreSQL hot standby (SQLSTATE 25006), a MariaDB server
// with read_only set, as a replica has it, seen by a user without READ ONLY ADMIN (1290), and
// a MariaDB session whose transactions are read-only (1792). The store's claim is refused; the
// error is transient, not poison.
func TestReadOnlyServerIsNotPoison(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("postgres standby", func(t *testing.T) {
		t.Parallel()
		r := testenv.NewPostgresReplica(t, false)
		primary := pgxTransientStore(t, openPgxPool(t, r.Primary.URL()), sqlinbox.Config{})
		standby := pgxTransientStore(t, openPgxPool(t, r.Standby.URL()), sqlinbox.Config{Table: primary.table})
		// The table reaches the standby by replication.
		waitFor(t, "the inbox table on the standby", func() bool { return standby.store.CheckTable(ctx) == nil })
		err := standby.deliver(t, newOrder(), func(*message.Message, runner) error { return nil })
		wantTransient(t, standby.store, sqlinbox.Postgres{}, err, "hot standby", pgCode("25006"))
	})
	t.Run("mariadb read_only", func(t *testing.T) {
		t.Parallel()
		m := testenv.NewMariaDB(t)
		for _, statement := range []string{
			"CREATE USER app@'127.0.0.1'",
			"GRANT ALL ON test.* TO app@'127.0.0.1'",
		} {
			if _, err := m.Query(statement); err != nil {
				t.Fatal(err)
			}
		}
		root := openSQL(t, "mysql", m.DSN("parseTime=true"))
		table := sqlTransientStore(t, root, sqlinbox.MySQL{}, sqlinbox.Config{}).table
		app := sqlTransientStore(t, openSQL(t, "mysql", "app@tcp(127.0.0.1:"+strconv.Itoa(m.Port)+")/test?parseTime=true"),
			sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
		if err := app.store.CheckTable(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Query("SET GLOBAL read_only = 1"); err != nil {
			t.Fatal(err)
		}
		err := app.deliver(t, newOrder(), func(*message.Message, runner) error { return nil })
		wantTransient(t, app.store, sqlinbox.MySQL{}, err, "read_only server", mysqlNumber(1290))
	})
	t.Run("mariadb read-only transaction", func(t *testing.T) {
		t.Parallel()
		s, _ := transientDBs[1].open(t, sqlinbox.Config{})
		// The driver sets tx_read_only on each of the pool's connections.
		readOnly := sqlTransientStore(t, openSQL(t, "mysql", withMySQLParam(testenv.MySQLDSN(t), "tx_read_only=1")), sqlinbox.MySQL{}, sqlinbox.Config{Table: s.table})
		err := readOnly.deliver(t, newOrder(), func(*message.Message, runner) error { return nil })
		wantTransient(t, readOnly.store, sqlinbox.MySQL{}, err, "read-only transaction", mysqlNumber(1792))
	})
}

// A Galera node that takes no queries (wsrep_reject_queries = ALL, which answers as a node
// that is not synced: 1047, "WSREP has not yet prepared node for application use"), on the
// package's shared cluster: transient, not poison. A case of TestGalera, which runs its cases
// in turn: no other may use the node while it rejects queries.
func galeraNodeNotReadyIsNotPoison(t *testing.T) {
	c := newGaleraTables(t)
	node := c.g.Nodes[2]
	store := sqlTransientStore(t, openSQL(t, "mysql", node.DSN("parseTime=true&interpolateParams=true")), sqlinbox.MySQL{},
		sqlinbox.Config{Table: c.table})
	if err := store.store.CheckTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	admin := openSQL(t, "mysql", node.DSN(""))
	if _, err := admin.Exec("SET GLOBAL wsrep_reject_queries = ALL"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("SET GLOBAL wsrep_reject_queries = NONE"); err != nil {
			t.Errorf("let %s take queries again: %v", node.Name, err)
		}
	})
	err := store.deliver(t, newOrder(), func(*message.Message, runner) error { return nil })
	wantTransient(t, store.store, sqlinbox.MySQL{}, err, "Galera node not ready", mysqlNumber(errNodeNotReady))
}

// withMySQLParam adds param to the parameters of a go-sql-driver/mysql DSN.
func withMySQLParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}

package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// kitFixture is what a team has around the handler it tests with handlertest: a store on
// its database, the application's pool (which a buggy repository writes through), three
// business tables, a fake payment client and the Recorder behind its inbox.Publisher.
type kitFixture struct {
	name  string
	store inbox.Store
	// pool runs statements outside the inbox transaction, as a repository built on the
	// application's pool does.
	pool runner
	// inTx runs statements through the inbox transaction in the handler's context.
	inTx func(ctx context.Context) (runner, bool)
	// commitTx commits the inbox transaction in the handler's context, as a data layer's
	// Commit does.
	commitTx func(ctx context.Context) error
	// lines reads a business table, ordered.
	lines        func(ctx context.Context, table string) ([]line, error)
	placeholders func(string) string
	pgx, sqlite  bool

	invoices, ledger, audit string

	payments  *payments
	recorder  *handlertest.Recorder
	publisher *inbox.Publisher
	// background holds the goroutines the buggy handlers leave; Snapshot and Reset settle
	// them first, so that what they write is there when the kit reads.
	background background
	// afterReset holds goroutines that write at the worst moment: once Reset has deleted
	// the rows, before the kit's Snapshot reads them.
	afterReset background
}

// background runs goroutines that a handler leaves behind at the latest moment the kit can
// still see them: each waits until settle, which Snapshot and Reset call before they read.
// A real goroutine runs at some moment after the handler returned; this one runs after the
// whole delivery, every time, so that the tests that catch it are deterministic.
type background struct {
	mu    sync.Mutex
	gates []chan struct{}
	wg    sync.WaitGroup
}

// later runs f in a goroutine once settle is called.
func (b *background) later(f func()) {
	gate := make(chan struct{})
	b.mu.Lock()
	b.gates = append(b.gates, gate)
	b.mu.Unlock()
	b.wg.Go(func() {
		<-gate
		f()
	})
}

// settle lets every waiting goroutine run and waits for them.
func (b *background) settle() {
	b.mu.Lock()
	gates := b.gates
	b.gates = nil
	b.mu.Unlock()
	for _, gate := range gates {
		close(gate)
	}
	b.wg.Wait()
}

// line is a row of a business table.
type line struct {
	OrderID string
	Cents   int64
}

// books is the business state the kit compares.
type books struct {
	Invoices []line
	Ledger   []line
	Audit    []line
}

// order is the payload of the message every test delivers.
type order struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

// kitMessageUUID is the UUID of that message, the same in every scenario and every run.
const kitMessageUUID = "0b6e2a3c-9a8d-4d7e-9f61-4b9d1c2e7a10"

func kitMessage(t *testing.T) *message.Message {
	payload, err := json.Marshal(order{OrderID: "order-1", Cents: 1250})
	if err != nil {
		t.Fatal(err)
	}
	return message.NewMessage(kitMessageUUID, payload)
}

func decodeOrder(msg *message.Message) (order, error) {
	var o order
	if err := json.Unmarshal(msg.Payload, &o); err != nil {
		return order{}, fmt.Errorf("decode order: %w", err)
	}
	return o, nil
}

// payments is a fake payment client: it records the idempotency key of every call.
type payments struct {
	mu   sync.Mutex
	keys []string
}

func (p *payments) charge(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, key)
}

func (p *payments) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.keys)
}

// schemaInboxStore is a store that creates its table.
type schemaInboxStore interface {
	inbox.Store
	schemaStore
}

// kitBackends are the databases the kit is tested on, each the way a team would open it:
// pgx; database/sql through OpenDB (PostgreSQL, SQLite) and through Connector (MariaDB,
// under NewMultiStatement too).
var kitBackends = []struct {
	name string
	open func(t *testing.T) *kitFixture
}{
	{"pgx/postgres", pgxKitFixture},
	{"database-sql/postgres", func(t *testing.T) *kitFixture {
		db, err := handlertest.OpenDB("pgx", testenv.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		return sqlKitFixture(t, "database-sql/postgres", db, sqlinbox.Postgres{}, sqlinbox.Config{})
	}},
	{"database-sql/mariadb", func(t *testing.T) *kitFixture {
		return sqlKitFixture(t, "database-sql/mariadb", mysqlKitDB(t, testenv.MySQLDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{})
	}},
	{"database-sql/sqlite", func(t *testing.T) *kitFixture {
		// A short busy timeout: a copy that waits for another's lock longer is nacked with
		// SQLITE_BUSY and redelivered (the store reports it transient), and a handler that writes through
		// the pool while it holds the inbox transaction fails fast instead of waiting for
		// itself.
		dsn := "file:" + filepath.Join(t.TempDir(), "kit.db") + "?_pragma=busy_timeout(250)&_pragma=journal_mode(WAL)"
		db, err := handlertest.OpenDB("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		f := sqlKitFixture(t, "database-sql/sqlite", db, sqlinbox.SQLite{}, sqlinbox.Config{})
		f.sqlite = true
		return f
	}},
}

// multiStatementsKitFixture is MariaDB's multi-statement store, its pool opened on the kit's
// Connector as Connector's documentation says.
func multiStatementsKitFixture(t *testing.T) *kitFixture {
	connector := handlertest.Connector(mysqlConnector(t, testenv.MySQLDSN(t)+"&multiStatements=true"))
	table := testenv.Name("kit_inbox")
	store, db, err := sqlinbox.NewMultiStatement(connector, sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return sqlKitFixtureFor(t, "database-sql/mariadb/multi-statements", db, store, sqlinbox.MySQL{}, table)
}

// coalescedKitFixture is MariaDB's coalesced store (sqlinbox.NewMultiStatementCoalesced), its
// pool opened on the kit's Connector.
func coalescedKitFixture(t *testing.T) *kitFixture {
	connector := handlertest.Connector(mysqlConnector(t, testenv.MySQLDSN(t)+"&multiStatements=true"))
	table := testenv.Name("kit_inbox")
	store, db, err := sqlinbox.NewMultiStatementCoalesced(connector, sqlinbox.MySQL{}, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return sqlKitFixtureFor(t, "database-sql/mariadb/coalesced", db, store, sqlinbox.MySQL{}, table)
}

// preparedKitFixture is MariaDB without interpolateParams: the driver declines a statement
// with arguments (driver.ErrSkip) and database/sql prepares it, which the kit counts once.
func preparedKitFixture(t *testing.T) *kitFixture {
	return sqlKitFixture(t, "database-sql/mariadb/prepared", mysqlKitDB(t, testenv.MySQLDSN(t)+"&interpolateParams=false"),
		sqlinbox.MySQL{}, sqlinbox.Config{})
}

func mysqlKitDB(t *testing.T, dsn string) *sql.DB {
	return sql.OpenDB(handlertest.Connector(mysqlConnector(t, dsn)))
}

func pgxKitFixture(t *testing.T) *kitFixture {
	pool := openPgxPool(t, testenv.PostgresURL(t))
	table := testenv.Name("kit_inbox")
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &kitFixture{
		name: "pgx/postgres", store: store, pool: pgxRunner{pool}, pgx: true,
		placeholders: inboxtest.DollarPlaceholders,
		inTx: func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			return pgxRunner{tx}, ok
		},
		commitTx: func(ctx context.Context) error {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			if !ok {
				return errNoTx
			}
			return tx.Commit(ctx)
		},
		lines: func(ctx context.Context, table string) ([]line, error) {
			rows, err := pool.Query(ctx, "SELECT order_id, cents FROM "+table+" ORDER BY order_id, cents")
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(row pgx.CollectableRow) (l line, err error) {
				err = row.Scan(&l.OrderID, &l.Cents)
				return l, err
			})
		},
	}
	f.finish(t, table)
	return f
}

func sqlKitFixture(t *testing.T, name string, db *sql.DB, dialect sqlinbox.Dialect, config sqlinbox.Config) *kitFixture {
	config.Table = testenv.Name("kit_inbox")
	store, err := sqlinbox.NewDB(db, dialect, config)
	if err != nil {
		t.Fatal(err)
	}
	return sqlKitFixtureFor(t, name, db, store, dialect, config.Table)
}

// sqlKitFixtureFor is sqlKitFixture for a store already made on db.
func sqlKitFixtureFor(t *testing.T, name string, db *sql.DB, store schemaInboxStore, dialect sqlinbox.Dialect, table string) *kitFixture {
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	dollar := dialect.Name() == (sqlinbox.Postgres{}).Name()
	f := &kitFixture{
		name: name, store: store, pool: sqlRunner{db, dollar},
		placeholders: func(q string) string { return q },
		inTx: func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return sqlRunner{tx, dollar}, ok
		},
		commitTx: func(ctx context.Context) error {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			if !ok {
				return errNoTx
			}
			return tx.Commit()
		},
		lines: func(ctx context.Context, table string) ([]line, error) {
			rows, err := db.QueryContext(ctx, "SELECT order_id, cents FROM "+table+" ORDER BY order_id, cents")
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []line
			for rows.Next() {
				var l line
				if err := rows.Scan(&l.OrderID, &l.Cents); err != nil {
					return nil, err
				}
				out = append(out, l)
			}
			return out, rows.Err()
		},
	}
	if dollar {
		f.placeholders = inboxtest.DollarPlaceholders
	}
	f.finish(t, table)
	return f
}

var errNoTx = fmt.Errorf("no inbox transaction in the message context")

// finish creates the business tables and the publisher, and drops the tables when the
// test ends.
func (f *kitFixture) finish(t *testing.T, inboxTable string) {
	f.invoices, f.ledger, f.audit = testenv.Name("kit_invoices"), testenv.Name("kit_ledger"), testenv.Name("kit_audit")
	for _, table := range []string{f.invoices, f.ledger, f.audit} {
		mustExec(t, f.pool, "CREATE TABLE "+table+" (order_id VARCHAR(64) NOT NULL, cents BIGINT NOT NULL)")
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, table := range []string{f.invoices, f.ledger, f.audit, inboxTable} {
			_ = f.pool.exec(ctx, "DROP TABLE IF EXISTS "+table)
		}
	})
	f.payments = &payments{}
	f.recorder = handlertest.NewRecorder()
	var err error
	if f.publisher, err = inbox.NewPublisher(f.recorder); err != nil {
		t.Fatal(err)
	}
}

// kitCase is the Case and the Options a team would write for handler h on f.
func (f *kitFixture) kitCase(t *testing.T, h message.HandlerFunc, writeBehind bool) (handlertest.Case, *handlertest.Options) {
	return handlertest.Case{
		Handler:  h,
		Store:    f.store,
		Config:   inbox.Config{Consumer: "billing", Publisher: f.publisher, WriteBehind: writeBehind},
		Message:  kitMessage(t),
		Snapshot: f.snapshot,
		Reset:    f.reset,
	}, &handlertest.Options{Recorder: f.recorder, Probe: f.payments.seen}
}

func (f *kitFixture) snapshot(ctx context.Context) (any, error) {
	f.background.settle()
	var b books
	var err error
	if b.Invoices, err = f.lines(ctx, f.invoices); err != nil {
		return nil, err
	}
	if b.Ledger, err = f.lines(ctx, f.ledger); err != nil {
		return nil, err
	}
	if b.Audit, err = f.lines(ctx, f.audit); err != nil {
		return nil, err
	}
	return b, nil
}

func (f *kitFixture) reset(ctx context.Context) error {
	f.background.settle()
	for _, table := range []string{f.invoices, f.ledger, f.audit} {
		if err := f.pool.exec(ctx, "DELETE FROM "+table); err != nil {
			return err
		}
	}
	f.afterReset.settle()
	return nil
}

// insert is the statement that writes an order's row into table, with ? placeholders.
func insert(table string) string { return "INSERT INTO " + table + " (order_id, cents) VALUES (?, ?)" }

// recordingTB is the test's testing.TB keeping what the kit reports instead of failing the
// test, so that the tests can assert the exact messages: the kit calls only Helper, Errorf
// and Logf.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	logs   []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) reports() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errors)
}

// scenariosOf returns the scenarios that reported, by the name each report starts with.
func scenariosOf(reports []string) []string {
	var names []string
	for _, r := range reports {
		name, _, _ := strings.Cut(strings.TrimPrefix(r, "handlertest: "), " ")
		name = strings.TrimRight(name, ":,")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

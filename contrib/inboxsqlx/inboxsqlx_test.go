package inboxsqlx_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxsqlx"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Invoice is the row the tests write, with a custom column name for the mapper.
type Invoice struct {
	OrderID string `db:"order_id"`
	Cents   int64  `db:"amount_cents"`
}

type database struct {
	name, driver string
	dsn          func(t testing.TB) string
	dialect      sqlinbox.Dialect
}

var databases = []database{
	{"PostgreSQL", "pgx", testenv.PostgresURL, sqlinbox.Postgres()},
	{"MariaDB", "mysql", testenv.MySQLDSN, sqlinbox.MySQL()},
}

// fixture is an inbox on one database, the application's *sqlx.DB on the same *sql.DB, and
// an invoice table, all dropped when the test ends.
type fixture struct {
	store    *sqlinbox.SQLStore
	db       *sqlx.DB
	invoices string
}

func newFixture(t *testing.T, d database) *fixture {
	t.Helper()
	ctx := context.Background()
	sqlDB, err := sql.Open(d.driver, d.dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	inboxTable := testenv.Name("inbox")
	store, err := sqlinbox.New(sqlDB, d.dialect, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: store, db: sqlx.NewDb(sqlDB, d.driver), invoices: testenv.Name("invoices")}
	if _, err := f.db.Exec("CREATE TABLE " + f.invoices + " (order_id varchar(100) NOT NULL, amount_cents bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		f.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+f.invoices)
		f.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+inboxTable)
	})
	return f
}

func (f *fixture) handler(t *testing.T, config inbox.Config, fn func(msg *message.Message) error) message.HandlerFunc {
	t.Helper()
	config.Consumer = "billing"
	mw, err := inbox.NewMiddleware(f.store, config, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) { return nil, fn(msg) })
}

func (f *fixture) invoicesFor(t *testing.T, orderID string) int {
	t.Helper()
	var n int
	if err := f.db.Get(&n, f.db.Rebind("SELECT COUNT(*) FROM "+f.invoices+" WHERE order_id = ?"), orderID); err != nil {
		t.Fatal(err)
	}
	return n
}

var errBusiness = errors.New("business rule failed")

// record is a repository method: a named insert, then a Select that maps the columns back.
func (f *fixture) record(ctx context.Context, tx *sqlx.Tx, inv Invoice) error {
	if _, err := tx.NamedExecContext(ctx, "INSERT INTO "+f.invoices+" (order_id, amount_cents) VALUES (:order_id, :amount_cents)", inv); err != nil {
		return err
	}
	var got []Invoice
	if err := tx.SelectContext(ctx, &got, tx.Rebind("SELECT order_id, amount_cents FROM "+f.invoices+" WHERE order_id = ?"), inv.OrderID); err != nil {
		return err
	}
	if len(got) != 1 || got[0] != inv {
		return errors.New("the transaction does not see the invoice it wrote")
	}
	return nil
}

func TestTxWritesInTheInboxTransaction(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				ctx := msg.Context()
				tx, ok := inboxsqlx.Tx(ctx, f.db)
				if !ok {
					return errors.New("no inbox transaction")
				}
				if tx.DriverName() != d.driver {
					t.Errorf("DriverName() = %q, want %q", tx.DriverName(), d.driver)
				}
				if err := f.record(ctx, tx, Invoice{OrderID: msg.UUID, Cents: 1250}); err != nil {
					return err
				}
				if msg.UUID == "fails" {
					return errBusiness
				}
				return nil
			})
			for range 3 {
				if err := inboxtest.Deliver(context.Background(), h, "order-1"); err != nil {
					t.Fatal(err)
				}
			}
			inboxtest.WantRows(t, "invoices of a message delivered 3 times", f.invoicesFor(t, "order-1"), 1)
			if err := inboxtest.Deliver(context.Background(), h, "fails"); !errors.Is(err, errBusiness) {
				t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
			}
			inboxtest.WantRows(t, "invoices of a failed handler", f.invoicesFor(t, "fails"), 0)
		})
	}
}

func TestTxKeepsUnsafeMode(t *testing.T) {
	f := newFixture(t, databases[0])
	for _, db := range []*sqlx.DB{f.db, f.db.Unsafe()} {
		h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
			ctx := msg.Context()
			tx, ok := inboxsqlx.Tx(ctx, db)
			if !ok {
				return errors.New("no inbox transaction")
			}
			// A column the struct does not have: an error, unless the DB is unsafe.
			var inv Invoice
			err := tx.GetContext(ctx, &inv, "SELECT 'o' AS order_id, 1 AS amount_cents, 2 AS extra")
			if unsafe := db != f.db; (err == nil) != unsafe {
				t.Errorf("unsafe DB %t: Get with an unknown column returned %v", unsafe, err)
			}
			return nil
		})
		if err := inboxtest.Deliver(context.Background(), h, testenv.Name("order")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCommitInsideIsErrTxEndedByHandler(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				tx, _ := inboxsqlx.Tx(msg.Context(), f.db)
				if err := f.record(msg.Context(), tx, Invoice{OrderID: msg.UUID}); err != nil {
					return err
				}
				return tx.Commit()
			})
			if err := inboxtest.Deliver(context.Background(), h, "order-3"); !errors.Is(err, inbox.ErrTxEndedByHandler) {
				t.Fatalf("handler committed: got %v, want %v", err, inbox.ErrTxEndedByHandler)
			}
			if err := inboxtest.Deliver(context.Background(), h, "order-3"); err != nil {
				t.Fatal(err) // a duplicate: the claim committed with the invoice
			}
			inboxtest.WantRows(t, "invoices", f.invoicesFor(t, "order-3"), 1)
		})
	}
}

func TestTxWithoutAnInboxTransaction(t *testing.T) {
	f := newFixture(t, databases[0])
	check := func(what string, ctx context.Context, db *sqlx.DB) {
		t.Helper()
		if tx, ok := inboxsqlx.Tx(ctx, db); ok || tx != nil {
			t.Errorf("%s: Tx returned %v, %t; want nil, false", what, tx, ok)
		}
	}
	check("a context of no message", context.Background(), f.db)
	var ran int
	run := func(h message.HandlerFunc) {
		t.Helper()
		if err := inboxtest.Deliver(context.Background(), h, testenv.Name("order")); err != nil {
			t.Fatal(err)
		}
	}
	run(f.handler(t, inbox.Config{WriteBehind: true}, func(msg *message.Message) error {
		ran++
		check("write-behind mode", msg.Context(), f.db)
		return nil
	}))
	run(f.handler(t, inbox.Config{}, func(msg *message.Message) error {
		ran++
		check("a nil *sqlx.DB", msg.Context(), nil)
		if tx, ok := inboxsqlx.Tx(msg.Context(), &sqlx.DB{}); !ok || tx.DriverName() != "" {
			t.Errorf("a zero *sqlx.DB: Tx returned %v, %t; want a transaction without a driver name", tx, ok)
		}
		return nil
	}))
	mw := testenv.PgxInboxMiddleware(t)
	run(mw(func(msg *message.Message) ([]*message.Message, error) {
		ran++
		check("a pgx transaction", msg.Context(), f.db)
		return nil, nil
	}))
	if ran != 3 {
		t.Fatalf("%d handlers ran, want 3", ran)
	}
}

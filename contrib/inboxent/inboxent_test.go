package inboxent_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxent"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

type database struct {
	name, driver, ent string
	dsn               func(t testing.TB) string
	dialect           sqlinbox.Dialect
	insert            string // with the table as %s
}

var databases = []database{
	{"PostgreSQL", "pgx", dialect.Postgres, testenv.PostgresURL, sqlinbox.Postgres{}, "INSERT INTO %s (order_id) VALUES ($1)"},
	{"MariaDB", "mysql", dialect.MySQL, testenv.MySQLDSN, sqlinbox.MySQL{}, "INSERT INTO %s (order_id) VALUES (?)"},
}

type fixture struct {
	d        database
	db       *sql.DB
	store    *sqlinbox.Store
	invoices string
}

func newFixture(t *testing.T, d database) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open(d.driver, d.dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	inboxTable := testenv.Name("inbox")
	store, err := sqlinbox.NewDB(db, d.dialect, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{d: d, db: db, store: store, invoices: testenv.Name("invoices")}
	if _, err := db.Exec("CREATE TABLE " + f.invoices + " (order_id varchar(100) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		db.ExecContext(ctx, "DROP TABLE IF EXISTS "+f.invoices)
		db.ExecContext(ctx, "DROP TABLE IF EXISTS "+inboxTable)
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

func (f *fixture) insert(ctx context.Context, drv dialect.ExecQuerier, orderID string) error {
	return drv.Exec(ctx, fmt.Sprintf(f.d.insert, f.invoices), []any{orderID}, nil)
}

func (f *fixture) invoicesFor(t *testing.T, orderID string) int {
	t.Helper()
	var n int
	q := "SELECT COUNT(*) FROM " + f.invoices + " WHERE order_id = ?"
	if f.d.ent == dialect.Postgres {
		q = inboxtest.DollarPlaceholders(q)
	}
	if err := f.db.QueryRow(q, orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var errBusiness = errors.New("business rule failed")

func TestDriverWritesInTheInboxTransaction(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				ctx := msg.Context()
				drv, ok := inboxent.Driver(ctx, d.ent)
				if !ok {
					return errors.New("no inbox transaction")
				}
				if drv.Dialect() != d.ent {
					t.Errorf("Dialect() = %q, want %q", drv.Dialect(), d.ent)
				}
				if err := f.insert(ctx, drv, msg.UUID); err != nil {
					return err
				}
				// What ent does for UpdateOne and edges, and client.Tx: a transaction of its
				// own, here a savepoint. One released, one rolled back.
				for _, undo := range []bool{false, true} {
					tx, err := drv.Tx(ctx)
					if err != nil {
						return err
					}
					suffix := "-kept"
					if undo {
						suffix = "-undone"
					}
					if err := f.insert(ctx, tx, msg.UUID+suffix); err != nil {
						return err
					}
					if undo {
						err = tx.Rollback()
					} else {
						err = tx.Commit()
					}
					if err != nil {
						return err
					}
				}
				if err := drv.Close(); err != nil {
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
			inboxtest.WantRows(t, "invoices of the released savepoint", f.invoicesFor(t, "order-1-kept"), 1)
			inboxtest.WantRows(t, "invoices of the rolled-back savepoint", f.invoicesFor(t, "order-1-undone"), 0)
			if err := inboxtest.Deliver(context.Background(), h, "fails"); !errors.Is(err, errBusiness) {
				t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
			}
			inboxtest.WantRows(t, "invoices of a failed handler", f.invoicesFor(t, "fails")+f.invoicesFor(t, "fails-kept"), 0)
		})
	}
}

func TestBeginTxRefusesOptions(t *testing.T) {
	f := newFixture(t, databases[0])
	h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
		drv, _ := inboxent.Driver(msg.Context(), dialect.Postgres)
		beginner := drv.(interface {
			BeginTx(context.Context, *sql.TxOptions) (dialect.Tx, error)
		})
		if _, err := beginner.BeginTx(msg.Context(), &sql.TxOptions{ReadOnly: true}); !errors.Is(err, inboxent.ErrTxOptions) {
			t.Errorf("BeginTx(read-only): got %v, want %v", err, inboxent.ErrTxOptions)
		}
		tx, err := beginner.BeginTx(msg.Context(), &sql.TxOptions{})
		if err != nil {
			return err
		}
		return tx.Commit()
	})
	if err := inboxtest.Deliver(context.Background(), h, "order-2"); err != nil {
		t.Fatal(err)
	}
}

func TestDriverWithoutAnInboxTransaction(t *testing.T) {
	f := newFixture(t, databases[0])
	check := func(what string, ctx context.Context, name string) {
		t.Helper()
		if drv, ok := inboxent.Driver(ctx, name); ok || drv != nil {
			t.Errorf("%s: Driver returned %v, %t; want nil, false", what, drv, ok)
		}
	}
	check("a context of no message", context.Background(), dialect.Postgres)
	var ran int
	run := func(h message.HandlerFunc) {
		t.Helper()
		if err := inboxtest.Deliver(context.Background(), h, testenv.Name("order")); err != nil {
			t.Fatal(err)
		}
	}
	run(f.handler(t, inbox.Config{WriteBehind: true}, func(msg *message.Message) error {
		ran++
		check("write-behind mode", msg.Context(), dialect.Postgres)
		return nil
	}))
	run(f.handler(t, inbox.Config{}, func(msg *message.Message) error {
		ran++
		check("an unknown dialect", msg.Context(), "oracle")
		check("no dialect", msg.Context(), "")
		return nil
	}))
	mw := testenv.PgxInboxMiddleware(t)
	run(mw(func(msg *message.Message) ([]*message.Message, error) {
		ran++
		check("a pgx transaction", msg.Context(), dialect.Postgres)
		return nil, nil
	}))
	if ran != 3 {
		t.Fatalf("%d handlers ran, want 3", ran)
	}
}

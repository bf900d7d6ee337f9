package inboxbun_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxbun"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Invoice is the row the tests write; its table name comes from the fixture (ModelTableExpr).
type Invoice struct {
	ID      int64  `bun:",pk,autoincrement"`
	OrderID string `bun:",notnull"`
}

type database struct {
	name, driver string
	dsn          func(t testing.TB) string
	dialect      sqlinbox.Dialect
	bun          func() schema.Dialect
}

var databases = []database{
	{"PostgreSQL", "pgx", testenv.PostgresURL, sqlinbox.Postgres(), func() schema.Dialect { return pgdialect.New() }},
	{"MariaDB", "mysql", testenv.MySQLDSN, sqlinbox.MySQL(), func() schema.Dialect { return mysqldialect.New() }},
}

type fixture struct {
	store    *sqlinbox.SQLStore
	db       *bun.DB
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
	f := &fixture{store: store, db: bun.NewDB(sqlDB, d.bun()), invoices: testenv.Name("invoices")}
	if _, err := f.db.NewCreateTable().Model((*Invoice)(nil)).ModelTableExpr(f.invoices).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		f.db.NewDropTable().ModelTableExpr(f.invoices).IfExists().Exec(ctx)
		f.db.NewDropTable().ModelTableExpr(inboxTable).IfExists().Exec(ctx)
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

// record is a repository method typed on bun.IDB, as repositories usually are.
func (f *fixture) record(ctx context.Context, db bun.IDB, orderID string) error {
	_, err := db.NewInsert().Model(&Invoice{OrderID: orderID}).ModelTableExpr(f.invoices).Exec(ctx)
	return err
}

func (f *fixture) invoicesFor(t *testing.T, orderID string) int {
	t.Helper()
	n, err := f.db.NewSelect().Model((*Invoice)(nil)).ModelTableExpr(f.invoices).Where("order_id = ?", orderID).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

var errBusiness = errors.New("business rule failed")

func TestTxWritesInTheInboxTransaction(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				tx, ok := inboxbun.Tx(msg.Context(), f.db)
				if !ok {
					return errors.New("no inbox transaction")
				}
				if err := f.record(msg.Context(), tx, msg.UUID); err != nil {
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

func TestRunInTxInsideIsASavepoint(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				ctx := msg.Context()
				tx, ok := inboxbun.Tx(ctx, f.db)
				if !ok {
					return errors.New("no inbox transaction")
				}
				if err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
					return f.record(ctx, sp, msg.UUID+"-kept")
				}); err != nil {
					return err
				}
				err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
					if err := f.record(ctx, sp, msg.UUID+"-undone"); err != nil {
						return err
					}
					return errBusiness
				})
				if !errors.Is(err, errBusiness) {
					return err
				}
				return nil
			})
			if err := inboxtest.Deliver(context.Background(), h, "order-2"); err != nil {
				t.Fatal(err)
			}
			inboxtest.WantRows(t, "invoices of the released savepoint", f.invoicesFor(t, "order-2-kept"), 1)
			inboxtest.WantRows(t, "invoices of the rolled-back savepoint", f.invoicesFor(t, "order-2-undone"), 0)
		})
	}
}

func TestCommitInsideIsErrTxEndedByHandler(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d)
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				tx, _ := inboxbun.Tx(msg.Context(), f.db)
				if err := f.record(msg.Context(), tx, msg.UUID); err != nil {
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
	check := func(what string, ctx context.Context, db *bun.DB) {
		t.Helper()
		if tx, ok := inboxbun.Tx(ctx, db); ok || tx.Tx != nil {
			t.Errorf("%s: Tx returned %v, %t; want a zero bun.Tx, false", what, tx, ok)
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
		check("a nil *bun.DB", msg.Context(), nil)
		check("a zero *bun.DB", msg.Context(), &bun.DB{})
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

package inboxgorm_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Invoice is the row the tests write; its table name comes from the fixture.
type Invoice struct {
	ID      int64  `gorm:"primaryKey"`
	OrderID string `gorm:"not null"`
}

// fixture is an inbox on one database, the application's shared *gorm.DB on the same
// *sql.DB, and an invoice table, all dropped when the test ends.
type fixture struct {
	store    *sqlinbox.Store
	db       *gorm.DB
	invoices string
}

type database struct {
	name    string
	open    func(t *testing.T) *sql.DB
	dialect sqlinbox.Dialect
	gorm    func(*sql.DB) gorm.Dialector
}

var databases = []database{
	{"PostgreSQL", func(t *testing.T) *sql.DB { return open(t, "pgx", testenv.PostgresURL(t)) }, sqlinbox.Postgres{},
		func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) }},
	{"MariaDB", func(t *testing.T) *sql.DB { return open(t, "mysql", testenv.MySQLDSN(t)) }, sqlinbox.MySQL{},
		func(db *sql.DB) gorm.Dialector {
			return mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true})
		}},
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newFixture(t *testing.T, d database, config *gorm.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	sqlDB := d.open(t)
	inboxTable := testenv.Name("inbox")
	store, err := sqlinbox.NewDB(sqlDB, d.dialect, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	config.Logger = logger.Discard
	db, err := gorm.Open(d.gorm(sqlDB), config)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: store, db: db, invoices: testenv.Name("invoices")}
	if err := db.Table(f.invoices).AutoMigrate(&Invoice{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = db.WithContext(ctx).Migrator().DropTable(f.invoices, inboxTable)
	})
	return f
}

// handler is the inbox middleware of f around fn.
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
	var n int64
	if err := f.db.Table(f.invoices).Where("order_id = ?", orderID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return int(n)
}

var errBusiness = errors.New("business rule failed")

func TestDBWritesInTheInboxTransaction(t *testing.T) {
	for _, d := range databases {
		for _, prepared := range []bool{false, true} {
			name := d.name
			if prepared {
				name += "/PrepareStmt"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, d, &gorm.Config{PrepareStmt: prepared})
				// Writes the invoice, then fails if the order ID says so.
				h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
					db, ok := inboxgorm.DB(msg.Context(), f.db)
					if !ok {
						return errors.New("no inbox transaction")
					}
					if err := db.Table(f.invoices).Create(&Invoice{OrderID: msg.UUID}).Error; err != nil {
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
				// The shared *gorm.DB is untouched: it still writes on the pool.
				if err := f.db.Table(f.invoices).Create(&Invoice{OrderID: "outside"}).Error; err != nil {
					t.Fatal(err)
				}
				inboxtest.WantRows(t, "invoices written on the shared DB", f.invoicesFor(t, "outside"), 1)
			})
		}
	}
}

func TestTransactionInsideIsASavepoint(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d, &gorm.Config{})
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				db, ok := inboxgorm.DB(msg.Context(), f.db)
				if !ok {
					return errors.New("no inbox transaction")
				}
				if err := db.Table(f.invoices).Create(&Invoice{OrderID: msg.UUID}).Error; err != nil {
					return err
				}
				err := db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Table(f.invoices).Create(&Invoice{OrderID: msg.UUID + "-nested"}).Error; err != nil {
						return err
					}
					return errBusiness // rolls back to the savepoint only
				})
				if !errors.Is(err, errBusiness) {
					return err
				}
				if err := db.Transaction(func(tx *gorm.DB) error {
					return tx.Table(f.invoices).Create(&Invoice{OrderID: msg.UUID + "-released"}).Error
				}); err != nil {
					return err
				}
				if msg.UUID == "fails" {
					return errBusiness // rolls back the released savepoint too
				}
				return nil
			})
			if err := inboxtest.Deliver(context.Background(), h, "order-2"); err != nil {
				t.Fatal(err)
			}
			inboxtest.WantRows(t, "invoices written before the savepoint", f.invoicesFor(t, "order-2"), 1)
			inboxtest.WantRows(t, "invoices written in the rolled-back savepoint", f.invoicesFor(t, "order-2-nested"), 0)
			inboxtest.WantRows(t, "invoices written in the released savepoint", f.invoicesFor(t, "order-2-released"), 1)
			if err := inboxtest.Deliver(context.Background(), h, "fails"); !errors.Is(err, errBusiness) {
				t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
			}
			inboxtest.WantRows(t, "invoices of a failed handler, savepoint released", f.invoicesFor(t, "fails-released"), 0)
		})
	}
}

func TestCommitInsideIsErrTxEndedByHandler(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, d, &gorm.Config{})
			h := f.handler(t, inbox.Config{}, func(msg *message.Message) error {
				db, _ := inboxgorm.DB(msg.Context(), f.db)
				if err := db.Table(f.invoices).Create(&Invoice{OrderID: msg.UUID}).Error; err != nil {
					return err
				}
				return db.Commit().Error
			})
			if err := inboxtest.Deliver(context.Background(), h, "order-3"); !errors.Is(err, inbox.ErrTxEndedByHandler) {
				t.Fatalf("handler committed: got %v, want %v", err, inbox.ErrTxEndedByHandler)
			}
			// The redelivery is a duplicate: the claim committed with the invoice.
			if err := inboxtest.Deliver(context.Background(), h, "order-3"); err != nil {
				t.Fatal(err)
			}
			inboxtest.WantRows(t, "invoices", f.invoicesFor(t, "order-3"), 1)
		})
	}
}

func TestDBWithoutAnInboxTransaction(t *testing.T) {
	d := databases[0]
	f := newFixture(t, d, &gorm.Config{})
	check := func(what string, ctx context.Context, db *gorm.DB) {
		t.Helper()
		got, ok := inboxgorm.DB(ctx, db)
		if ok || got != nil {
			t.Errorf("%s: DB returned %v, %t; want nil, false", what, got, ok)
		}
	}
	check("a context of no message", context.Background(), f.db)
	check("a zero *gorm.DB", context.Background(), &gorm.DB{})

	var ran int
	run := func(h message.HandlerFunc) {
		t.Helper()
		if err := inboxtest.Deliver(context.Background(), h, testenv.Name("order")); err != nil {
			t.Fatal(err)
		}
	}
	// Write-behind mode: the handler runs before any transaction begins.
	run(f.handler(t, inbox.Config{WriteBehind: true}, func(msg *message.Message) error {
		ran++
		check("write-behind mode", msg.Context(), f.db)
		return nil
	}))
	// A nil *gorm.DB inside a real claim.
	run(f.handler(t, inbox.Config{}, func(msg *message.Message) error {
		ran++
		check("a nil *gorm.DB", msg.Context(), nil)
		check("a zero *gorm.DB", msg.Context(), &gorm.DB{})
		return nil
	}))
	// Another driver's transaction: a pgx store puts a pgx.Tx in the context.
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

package gormrepo_test

import (
	"context"
	"database/sql"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/gormrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoice is a row of the invoices table, as the kit compares it: no ID, which differs
// between two runs of one delivery.
type invoice struct {
	OrderID     string
	AmountCents int64
}

// books is what the handler changes.
type books struct{ Invoices []invoice }

// The *sql.DB under the store and under GORM is opened through the kit, so that the kit
// sees the statements GORM sends on the inbox transaction.

func TestHandlerPostgres(t *testing.T) {
	db := openThroughTheKit(t, "pgx", layertest.PostgresURL(t))
	runKit(t, db, sqlinbox.Postgres{}, postgres.New(postgres.Config{Conn: db}))
}

func TestHandlerMariaDB(t *testing.T) {
	db := openThroughTheKit(t, "mysql", layertest.MySQLDSN(t))
	runKit(t, db, sqlinbox.MySQL{}, mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true}))
}

func openThroughTheKit(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := handlertest.OpenDB(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// runKit runs Handle through the kit (copies one after another and at once, a failure at
// each of its statements, at COMMIT and after it returned), and the write-behind path
// (Queue) the same way.
func runKit(t *testing.T, sqlDB *sql.DB, dialect sqlinbox.Dialect, dialector gorm.Dialector) {
	ctx := context.Background()
	store, err := sqlinbox.NewDB(sqlDB, dialect, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&gormrepo.Invoice{}); err != nil {
		t.Fatal(err)
	}
	h := &gormrepo.Handler{DB: db}
	c := handlertest.Case{
		Handler: layertest.KitHandler(h.Handle),
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: layertest.OrderMessage(t),
		Snapshot: func(ctx context.Context) (any, error) {
			var invoices []invoice
			err := db.WithContext(ctx).Model(&gormrepo.Invoice{}).Order("order_id, amount_cents").Find(&invoices).Error
			return books{Invoices: invoices}, err
		},
		Reset: func(ctx context.Context) error {
			return db.WithContext(ctx).Where("1 = 1").Delete(&gormrepo.Invoice{}).Error
		},
	}
	t.Run("claim-first", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
	c.Config.WriteBehind = true
	c.Handler = layertest.QueueHandler(h.Queue)
	t.Run("write-behind", func(t *testing.T) { handlertest.Run(t.Context(), t, c, nil) })
}

package gormrepo_test

import (
	"context"
	"database/sql"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/gormrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestGORMPostgres(t *testing.T) {
	db := layertest.Open(t, "pgx", layertest.PostgresURL(t))
	run(t, db, sqlinbox.Postgres{}, postgres.New(postgres.Config{Conn: db}), true)
}

func TestGORMMariaDB(t *testing.T) {
	db := layertest.Open(t, "mysql", layertest.MySQLDSN(t))
	run(t, db, sqlinbox.MySQL{}, mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true}), false)
}

func run(t *testing.T, sqlDB *sql.DB, dialect sqlinbox.Dialect, dialector gorm.Dialector, pg bool) {
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
	inTx := func(ctx context.Context) *gorm.DB {
		tx, _ := inboxgorm.DB(ctx, db)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       sqlDB,
		Postgres: pg,
		Record:   h.Record,
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			return gormrepo.Create(db.WithContext(ctx), o) // the trap: the shared DB is the pool
		},
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			return inTx(ctx).Transaction(func(tx *gorm.DB) error { // a SAVEPOINT
				if err := gormrepo.Create(tx, o); err != nil {
					return err
				}
				return then()
			})
		},
		EndTx: func(ctx context.Context, commit bool) error {
			if commit {
				return inTx(ctx).Commit().Error
			}
			return inTx(ctx).Rollback().Error
		},
		Queue: h.Queue,
	})
}

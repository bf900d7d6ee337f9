package sqlxrepo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/inboxkit/watermill-inbox/contrib/inboxsqlx"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/sqlxrepo"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestSQLX(t *testing.T) {
	ctx := context.Background()
	sqlDB := layertest.Open(t, "pgx", layertest.PostgresURL(t))
	db := sqlx.NewDb(sqlDB, "pgx")
	if _, err := db.Exec(layertest.InvoicesDDL); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.New(sqlDB, sqlinbox.Postgres(), sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	h := &sqlxrepo.Handler{DB: db}
	inTx := func(ctx context.Context) *sqlx.Tx {
		tx, _ := inboxsqlx.Tx(ctx, db)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       sqlDB,
		Postgres: true,
		Record:   h.Record,
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			return sqlxrepo.Record(ctx, db, o) // the trap: the *sqlx.DB is the pool
		},
		// sqlx has no nested transactions: a savepoint by hand.
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			tx := inTx(ctx)
			if _, err := tx.ExecContext(ctx, "SAVEPOINT nested"); err != nil {
				return err
			}
			err := sqlxrepo.Record(ctx, tx, o)
			if err == nil {
				err = then()
			}
			if err != nil {
				_, undoErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT nested")
				return errors.Join(err, undoErr)
			}
			_, err = tx.ExecContext(ctx, "RELEASE SAVEPOINT nested")
			return err
		},
		EndTx: func(ctx context.Context, commit bool) error {
			if commit {
				return inTx(ctx).Commit()
			}
			return inTx(ctx).Rollback()
		},
		Queue: h.Queue,
	})
}

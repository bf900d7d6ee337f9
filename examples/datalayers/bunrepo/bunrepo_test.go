package bunrepo_test

import (
	"context"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/inboxkit/watermill-inbox/contrib/inboxbun"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/bunrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestBun(t *testing.T) {
	ctx := context.Background()
	sqlDB := layertest.Open(t, "pgx", layertest.PostgresURL(t))
	db := bun.NewDB(sqlDB, pgdialect.New())
	if _, err := db.NewCreateTable().Model((*bunrepo.Invoice)(nil)).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.New(sqlDB, sqlinbox.Postgres(), sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	h := &bunrepo.Handler{DB: db}
	inTx := func(ctx context.Context) bun.Tx {
		tx, _ := inboxbun.Tx(ctx, db)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       sqlDB,
		Postgres: true,
		Record:   h.Record,
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			return bunrepo.Record(ctx, db, o) // the trap: the *bun.DB is the pool
		},
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			return inTx(ctx).RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error { // a SAVEPOINT
				if err := bunrepo.Record(ctx, sp, o); err != nil {
					return err
				}
				return then()
			})
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

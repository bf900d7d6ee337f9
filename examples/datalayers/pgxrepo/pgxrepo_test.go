package pgxrepo_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/pgxrepo"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestPgxRepository(t *testing.T) {
	ctx := context.Background()
	url := layertest.PostgresURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, layertest.InvoicesDDL); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	inTx := func(ctx context.Context) pgx.Tx {
		tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       layertest.Open(t, "pgx", url),
		Postgres: true,
		Record: func(ctx context.Context, o billing.OrderPlaced) error {
			return pgxrepo.NewInvoices(inTx(ctx)).Record(ctx, o)
		},
		RecordOnPool: pgxrepo.NewInvoices(pool).Record, // the trap: built once, on the pool
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			return pgx.BeginFunc(ctx, inTx(ctx), func(sp pgx.Tx) error {
				if err := pgxrepo.NewInvoices(sp).Record(ctx, o); err != nil {
					return err
				}
				return then()
			})
		},
		EndTx: func(ctx context.Context, commit bool) error {
			if commit {
				return inTx(ctx).Commit(ctx)
			}
			return inTx(ctx).Rollback(ctx)
		},
		Queue: func(ctx context.Context, o billing.OrderPlaced) error {
			return inbox.ExecAtCommit(ctx, pgxrepo.RecordInvoiceSQL, o.OrderID, o.AmountCents)
		},
	})
}

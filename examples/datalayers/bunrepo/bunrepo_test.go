package bunrepo_test

import (
	"context"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/bunrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestBunPostgres(t *testing.T) {
	run(t, bun.NewDB(layertest.Open(t, "pgx", layertest.PostgresURL(t)), pgdialect.New()), sqlinbox.Postgres{}, true)
}

func TestBunMariaDB(t *testing.T) {
	run(t, bun.NewDB(layertest.Open(t, "mysql", layertest.MySQLDSN(t)), mysqldialect.New()), sqlinbox.MySQL{}, false)
}

func run(t *testing.T, db *bun.DB, dialect sqlinbox.Dialect, pg bool) {
	ctx := context.Background()
	if _, err := db.NewCreateTable().Model((*bunrepo.Invoice)(nil)).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := bunrepo.NewStore(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	h := &bunrepo.Handler{DB: db}
	inTx := func(ctx context.Context) bun.Tx {
		tx, _ := inbox.TxFromContext[bun.Tx](ctx)
		return tx
	}
	layertest.Run(t, layertest.Layer{
		Store:    store,
		DB:       db.DB,
		Postgres: pg,
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

// bun's own bun.Tx runs the application's query hooks inside the inbox transaction.
func TestBunQueryHooksRunOnTheInboxTransaction(t *testing.T) {
	db := bun.NewDB(layertest.Open(t, "pgx", layertest.PostgresURL(t)), pgdialect.New())
	hook := &countingHook{}
	db = db.WithQueryHook(hook)
	if _, err := db.NewCreateTable().Model((*bunrepo.Invoice)(nil)).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	store, err := bunrepo.NewStore(db, sqlinbox.Postgres{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := hook.queries
	h := &bunrepo.Handler{DB: db}
	if err := layertest.Deliver(layertest.Handler(t, store, h.Record), "order-1"); err != nil {
		t.Fatal(err)
	}
	if n := hook.queries - before; n < 1 {
		t.Errorf("the query hook saw %d queries of the handler, want its INSERT", n)
	}
}

// countingHook counts the queries bun runs (the tests run one delivery at a time).
type countingHook struct{ queries int }

func (h *countingHook) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (h *countingHook) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	if e.Operation() == "INSERT" {
		h.queries++
	}
}

package entrepo_test

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb/invoice"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func setup(t *testing.T) (*entdb.Client, *sqlinbox.Store, layertest.Layer) {
	t.Helper()
	ctx := context.Background()
	sqlDB := layertest.Open(t, "pgx", layertest.PostgresURL(t))
	pool := entdb.NewClient(entdb.Driver(entsql.OpenDB(dialect.Postgres, sqlDB)))
	if err := pool.Schema.Create(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewDB(sqlDB, sqlinbox.Postgres{}, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	inTx := func(ctx context.Context) *entdb.Client {
		client, _ := entrepo.Client(ctx)
		return client
	}
	return pool, store, layertest.Layer{
		Store:    store,
		DB:       sqlDB,
		Postgres: true,
		Record: func(ctx context.Context, o billing.OrderPlaced) error {
			return entrepo.Record(ctx, inTx(ctx), o)
		},
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			return entrepo.Record(ctx, pool, o) // the trap: the application's client is the pool
		},
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			tx, err := inTx(ctx).Tx(ctx) // a SAVEPOINT
			if err != nil {
				return err
			}
			if err := entrepo.Record(ctx, tx.Client(), o); err != nil {
				return err
			}
			if err := then(); err != nil {
				if rollbackErr := tx.Rollback(); rollbackErr != nil {
					return rollbackErr
				}
				return err
			}
			return tx.Commit()
		},
		NoEndTx: "ent has no handle on the inbox transaction itself: client.Tx is a savepoint, its Commit releases it",
		NoQueue: "ent renders no SQL without running it: its builders execute through the driver",
	}
}

func TestEnt(t *testing.T) {
	_, _, layer := setup(t)
	layertest.Run(t, layer)
}

// UpdateOne asks the driver for a transaction of its own (a panic on a plain driver over
// the *sql.Tx): on inboxent's driver it is a savepoint and rolls back with the handler.
func TestEntUpdateOneInTheInboxTransaction(t *testing.T) {
	pool, store, _ := setup(t)
	ctx := context.Background()
	created, err := pool.Invoice.Create().SetOrderID("order-update").SetAmountCents(100).Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fail := true
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		client, _ := entrepo.Client(msg.Context())
		if err := client.Invoice.UpdateOneID(created.ID).AddAmountCents(50).Exec(msg.Context()); err != nil {
			return nil, err
		}
		if fail {
			return nil, errBusiness
		}
		return nil, nil
	})
	amount := func() int64 {
		t.Helper()
		inv, err := pool.Invoice.Query().Where(invoice.ID(created.ID)).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return inv.AmountCents
	}
	if err := inboxtest.Deliver(ctx, h, testenv.Name("msg")); err == nil {
		t.Fatal("the failing handler was acked")
	}
	if got := amount(); got != 100 {
		t.Fatalf("after the failed handler: %d cents, want 100", got)
	}
	fail = false
	key := testenv.Name("msg")
	for range 3 {
		if err := inboxtest.Deliver(ctx, h, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := amount(); got != 150 {
		t.Fatalf("after 3 copies of one message: %d cents, want 150", got)
	}
}

type businessError struct{}

func (businessError) Error() string { return "business rule failed" }

var errBusiness error = businessError{}

package sqlc_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/sqlc"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/sqlc/invoicedb"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// setup returns a pool and a pgx store on a fresh schema holding schema.sql's table.
func setup(t *testing.T) (*pgxpool.Pool, *sqlinbox.Store, layertest.Layer) {
	t.Helper()
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
	h := &sqlc.Handler{Queries: invoicedb.New(pool)}
	params := func(o billing.OrderPlaced) invoicedb.RecordInvoiceParams {
		return invoicedb.RecordInvoiceParams{OrderID: o.OrderID, AmountCents: o.AmountCents}
	}
	return pool, store, layertest.Layer{
		Store:    store,
		DB:       layertest.Open(t, "pgx", url),
		Postgres: true,
		Record:   h.Record,
		RecordOnPool: func(ctx context.Context, o billing.OrderPlaced) error {
			_, err := h.Queries.RecordInvoice(ctx, params(o)) // the trap: Queries on the pool
			return err
		},
		Nested: func(ctx context.Context, o billing.OrderPlaced, then func() error) error {
			tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
			// Begin on a pgx.Tx is a savepoint.
			return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				if _, err := h.Queries.WithTx(sp).RecordInvoice(ctx, params(o)); err != nil {
					return err
				}
				return then()
			})
		},
		EndTx: func(ctx context.Context, commit bool) error {
			tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
			if commit {
				return tx.Commit(ctx)
			}
			return tx.Rollback(ctx)
		},
		Queue: func(ctx context.Context, o billing.OrderPlaced) error {
			return invoicedb.QueueRecordInvoice(ctx, params(o))
		},
	}
}

func TestSQLC(t *testing.T) {
	_, _, layer := setup(t)
	layertest.Run(t, layer)
}

// CopyFrom and batches of the generated code run on the inbox transaction too.
func TestSQLCCopyFromAndBatchInTheInboxTransaction(t *testing.T) {
	pool, store, _ := setup(t)
	queries := invoicedb.New(pool)
	fail := true
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, _ := inbox.TxFromContext[pgx.Tx](ctx)
		q := queries.WithTx(tx)
		n, err := q.RecordInvoices(ctx, []invoicedb.RecordInvoicesParams{
			{OrderID: msg.UUID, AmountCents: 100}, {OrderID: msg.UUID, AmountCents: 200},
		})
		if err != nil || n != 2 {
			return nil, errors.Join(err, errors.New("copy did not write 2 rows"))
		}
		var batchErr error
		q.AddToInvoice(ctx, []invoicedb.AddToInvoiceParams{{OrderID: msg.UUID, AmountCents: 5}}).Exec(func(_ int, err error) {
			batchErr = errors.Join(batchErr, err)
		})
		if batchErr != nil {
			return nil, batchErr
		}
		if fail {
			return nil, errors.New("business rule failed")
		}
		return nil, nil
	})
	sum := func() (rows int64, cents int64) {
		t.Helper()
		if err := pool.QueryRow(context.Background(), "SELECT count(*), coalesce(sum(amount_cents), 0) FROM invoices WHERE order_id = 'order-copy'").Scan(&rows, &cents); err != nil {
			t.Fatal(err)
		}
		return rows, cents
	}
	if err := inboxtest.Deliver(context.Background(), h, "order-copy"); err == nil {
		t.Fatal("the failing handler was acked")
	}
	if rows, _ := sum(); rows != 0 {
		t.Fatalf("after the failed handler: %d rows, want 0", rows)
	}
	fail = false
	for range 3 {
		if err := inboxtest.Deliver(context.Background(), h, "order-copy"); err != nil {
			t.Fatal(err)
		}
	}
	if rows, cents := sum(); rows != 2 || cents != 310 {
		t.Fatalf("after 3 deliveries: %d rows, %d cents; want 2 rows, 310 cents", rows, cents)
	}
}

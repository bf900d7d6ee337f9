package inbox_test

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Adding the inbox to a router on PostgreSQL through pgx. The runnable programs, with
// output that is checked, are in the examples module (go run ./examples/quickstart).
func ExampleNewMiddleware() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{}) // table "inbox"
	if err != nil {
		panic(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		panic(err)
	}

	logger := watermill.NewStdLogger(false, false)
	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{}, logger)
	if err != nil {
		panic(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	retry := middleware.Retry{MaxRetries: 3}
	router.AddMiddleware(retry.Middleware, inboxMiddleware) // the inbox innermost

	// router.AddConsumerHandler("billing", "orders", subscriber, createInvoice)
	_ = router
}

// A handler reads the inbox transaction in its driver's type and writes through it.
func ExampleTxFromContext() {
	createInvoice := func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx) // *sql.Tx for a sqlinbox.SQLStore
		if !ok {
			return errors.New("no inbox transaction: is the inbox middleware on this handler?")
		}
		_, err := tx.Exec(ctx, "INSERT INTO invoices (order_id) VALUES ($1)", msg.UUID)
		return err // an error rolls back the invoice and the claim together
	}
	_ = createInvoice
}

// With database/sql the transaction is a *sql.Tx.
func ExampleTxFromContext_databaseSQL() {
	createInvoice := func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		if !ok {
			return errors.New("no inbox transaction")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO invoices (order_id) VALUES (?)", msg.UUID)
		return err
	}
	_ = createInvoice
}

// KeyFromContext gives the claimed key, to pass on to systems the transaction cannot roll
// back, so that they deduplicate a call made again after a rollback.
func ExampleKeyFromContext() {
	chargeCard := func(msg *message.Message) error {
		key, _ := inbox.KeyFromContext(msg.Context())
		_ = key // e.g. the Idempotency-Key header of a payment provider's API
		return nil
	}
	_ = chargeCard
}

package testenv

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// PgxInboxMiddleware returns the inbox middleware of a pgx store, for consumer "billing", on
// a new table of PostgresURL that t's cleanup drops: a handler behind it finds a pgx.Tx in
// its context, which tests of a database/sql data layer use as another driver's transaction.
func PgxInboxMiddleware(t testing.TB) message.HandlerMiddleware {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := Name("inbox")
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS "`+table+`"`) })
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

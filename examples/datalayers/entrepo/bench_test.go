package entrepo_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// BenchmarkEntClient is the cost of an ent client on the inbox transaction, built once per
// message (inboxent.Driver and the generated NewClient), measured inside one real inbox
// transaction.
func BenchmarkEntClient(b *testing.B) {
	db, err := sql.Open("pgx", testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	table := testenv.Name("inbox")
	store, err := sqlinbox.NewDB(db, sqlinbox.Postgres{}, sqlinbox.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer db.Exec("DROP TABLE " + table)
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		b.ResetTimer()
		for range b.N {
			if _, ok := entrepo.Client(msg.Context()); !ok {
				b.Fatal("no inbox transaction")
			}
		}
		b.StopTimer()
		return nil, nil
	})
	if err := inboxtest.Deliver(context.Background(), h, testenv.Name("msg")); err != nil {
		b.Fatal(err)
	}
}

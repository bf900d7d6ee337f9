package sqlinbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/pgtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Micro-benchmarks of one message at a time through the middleware over a pgx store: time
// and allocations per message, for go test -bench . ./sqlinbox/. What the inbox
// costs next to the same work without it, at several round-trip times and worker counts, is
// measured by the benchmark program in bench/ (go run ./bench).

// BenchmarkPgxFirstDelivery is a new message whose handler queues one INSERT.
func BenchmarkPgxFirstDelivery(b *testing.B) {
	h, _ := benchHandler(b)
	b.ReportAllocs()
	for b.Loop() {
		benchDeliver(b, h, watermill.NewUUID())
	}
}

// BenchmarkPgxDuplicate is a message whose key is already committed.
func BenchmarkPgxDuplicate(b *testing.B) {
	h, runs := benchHandler(b)
	key := watermill.NewUUID()
	benchDeliver(b, h, key)
	b.ReportAllocs()
	for b.Loop() {
		benchDeliver(b, h, key)
	}
	if *runs != 1 {
		b.Fatalf("the handler ran %d times for one key", *runs)
	}
}

func benchHandler(b *testing.B) (message.HandlerFunc, *int) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Need(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	business, table := pgtest.Name("bench_business"), pgtest.Name("bench_inbox")
	b.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP TABLE IF EXISTS %s, %s", business, table))
	})
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id text PRIMARY KEY)", business)); err != nil {
		b.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		b.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	insert := fmt.Sprintf("INSERT INTO %s (id) VALUES ($1)", business)
	runs := new(int)
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		*runs++
		return nil, inbox.ExecAtCommit(msg.Context(), insert, msg.UUID)
	}), runs
}

func benchDeliver(b *testing.B, h message.HandlerFunc, key string) {
	msg := message.NewMessage(key, message.Payload(`{"customer":"acme","amount_cents":1234}`))
	if _, err := h(msg); err != nil {
		b.Fatal(err)
	}
}

package integration

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// queueingHandler writes its invoice with inbox.ExecAtCommit (the write-behind path) and returns
// one produced message, so the commit carries queued statements and a record together.
func (b *backend) queueingHandler(t *testing.T, statements func(key string) []string) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		for _, statement := range statements(msg.UUID) {
			if err := inbox.ExecAtCommit(msg.Context(), b.placeholders(statement), "billing", msg.UUID); err != nil {
				return nil, err
			}
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("invoice"))}, nil
	})
}

func TestQueuedStatementsCommitWithTheClaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
		h := b.queueingHandler(t, func(string) []string { return []string{insert, insert} })
		key := watermill.NewUUID()
		for range 2 {
			if err := deliver(context.Background(), h, key); err != nil {
				t.Fatal(err)
			}
		}
		wantRows(t, "invoices (two queued inserts, delivered twice)", b.invoices(t, "billing", key), 2)
		wantRows(t, "claims with their produced message", b.rows(t, b.table, "WHERE produced IS NOT NULL"), 1)
	})
}

func TestFailedQueuedStatementRollsBackEverything(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
		broken := true
		h := b.queueingHandler(t, func(string) []string {
			if broken {
				return []string{insert, "INSERT INTO no_such_table_" + b.business + " (consumer, msg_key) VALUES (?, ?)"}
			}
			return []string{insert}
		})
		key := watermill.NewUUID()
		if err := deliver(context.Background(), h, key); err == nil {
			t.Fatal("a failed queued statement was acked")
		}
		wantRows(t, "invoices after the failure", b.invoices(t, "billing", key), 0)
		wantRows(t, "claims after the failure", b.claims(t, "billing", key), 0)

		broken = false
		if err := deliver(context.Background(), h, key); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		wantRows(t, "invoices", b.invoices(t, "billing", key), 1)
		wantRows(t, "claims", b.claims(t, "billing", key), 1)
	})
}

func TestQueueOutsideTheInbox(t *testing.T) {
	if err := inbox.ExecAtCommit(context.Background(), "SELECT 1"); !errors.Is(err, inbox.ErrNoHandlerContext) {
		t.Errorf("err = %v, want ErrNoHandlerContext", err)
	}
}

// The pgx store sends COMMIT in a batch and then closes pgx's transaction without a round
// trip; the connection must go back to the pool healthy, not be closed and replaced.
func TestPgxCommitBatchKeepsPoolConnections(t *testing.T) {
	ctx := context.Background()
	const maxConns = 4
	pool := openPgxPool(t, testenv.PostgresURL(t), func(c *pgxpool.Config) { c.MaxConns = maxConns })
	b := pgxBackend(t)
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	b.store = store
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	h := b.queueingHandler(t, func(string) []string { return []string{insert} })
	const messages = 200
	for range messages {
		if err := deliver(ctx, h, watermill.NewUUID()); err != nil {
			t.Fatal(err)
		}
	}
	wantRows(t, "invoices", b.rows(t, b.business, ""), messages)
	if opened := pool.Stat().NewConnsCount(); opened > maxConns {
		t.Errorf("the pool opened %d connections for %d sequential messages: commits are closing them", opened, messages)
	}
}

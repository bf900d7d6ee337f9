package e2e

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Pool connects to the test PostgreSQL (testenv: skip or fail when it is missing).
func Pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DropTable drops table when the test ends.
func DropTable(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	parsed, err := (sqlinbox.Postgres{}).ParseTable(table)
	quoted := parsed.Quoted
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(context.Background())
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+quoted); err != nil {
			t.Errorf("drop table %s: %v", table, err)
		}
	})
}

// checkDatabase checks the tables: one invoice per order, one inbox row per order.
func checkDatabase(t *testing.T, pool *pgxpool.Pool, invoices *Invoices, inboxTable string, orders []billing.OrderPlaced, keyIsOrderID bool) {
	t.Helper()
	ctx := t.Context()
	counts, err := invoices.Count(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Invoices != len(orders) || counts.Orders != len(orders) {
		t.Errorf("%d invoices for %d distinct orders, want exactly one for each of %d orders",
			counts.Invoices, counts.Orders, len(orders))
	}
	parsed, _ := (sqlinbox.Postgres{}).ParseTable(inboxTable)
	quoted := parsed.Quoted
	rows, err := pool.Query(ctx, "SELECT message_id FROM "+quoted+" WHERE consumer = $1", Consumer)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(orders) {
		t.Errorf("%d inbox rows, want one per order: %d", len(keys), len(orders))
	}
	if keyIsOrderID {
		for _, o := range orders {
			if !keys[o.OrderID] {
				t.Errorf("order %s has no inbox row", o.OrderID)
				break
			}
		}
	}
}

package integration

import (
	"maps"
	"net/url"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// Behind a pooler in transaction mode (PgBouncer here; RDS Proxy and the poolers of managed
// services alike) each transaction may run on another server connection: nothing may rely
// on state that outlives a transaction. The tests start their own PgBouncer with fewer
// server connections than the store's pool has clients.

// poolerServerConns is the server connections PgBouncer keeps per database and user; the
// stores' pools have 16.
const poolerServerConns = 4

// poolerBackends are the PostgreSQL stores set as docs/pooler.md says, each reaching
// PostgreSQL through url, a PgBouncer's.
func poolerBackends(poolerURL string) map[string]newBackend {
	pgxMode := func(mode pgx.QueryExecMode) newBackend {
		return func(t *testing.T) *backend {
			return pgxBackendAt(t, poolerURL, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
		}
	}
	stdlibMode := func(mode string) newBackend {
		return func(t *testing.T) *backend {
			return stdlibPostgresBackendAt(t, withQuery(t, poolerURL, "default_query_exec_mode", mode))
		}
	}
	return map[string]newBackend{
		"pgx/exec":                     pgxMode(pgx.QueryExecModeExec),
		"pgx/simple-protocol":          pgxMode(pgx.QueryExecModeSimpleProtocol),
		"database-sql/exec":            stdlibMode("exec"),
		"database-sql/simple-protocol": stdlibMode("simple_protocol"),
		"pgx/describe-exec":            pgxMode(pgx.QueryExecModeDescribeExec),
		"database-sql/describe-exec":   stdlibMode("describe_exec"),
	}
}

// The whole conformance suite, claim-first and write-behind, on both PostgreSQL stores
// through PgBouncer in transaction mode. Before the pgx store followed the pool's mode, every
// claim in exec and simple-protocol mode failed here: "prepared statement ... already
// exists" (or "does not exist"), as a statement prepared by name on one server connection
// met another.
func TestPoolerStoreConformance(t *testing.T) {
	t.Parallel()
	stores := poolerBackends(testenv.PgBouncerURL(t, poolerServerConns))
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			harness := func(t *testing.T) *inboxtest.Harness { return stores[name](t).harness() }
			t.Run("claim-first", func(t *testing.T) { inboxtest.Run(t, harness, nil) })
			t.Run("write-behind", func(t *testing.T) {
				inboxtest.Run(t, harness, &inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
			})
		})
	}
}

// withQuery returns rawURL with the query parameter key set to value.
func withQuery(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// The chaos test (see TestChaosExactlyOneInvoicePerOrder) with the fault proxy between the
// routers and PgBouncer: cuts before and during COMMIT and at statements, server sessions
// terminated behind the pooler, handler errors and panics, a router restarted. Every order
// still has exactly one invoice and one claim. The routers have 16 connections to the
// pooler, which has 4 to the server.
func TestPoolerChaosExactlyOneInvoicePerOrder(t *testing.T) {
	t.Parallel()
	poolerURL := testenv.PgBouncerURL(t, poolerServerConns)
	orders := max(chaosOrders(t)/2, 200)
	pgxMode := func(mode pgx.QueryExecMode, writeBehind bool) func(t *testing.T) *chaosDB {
		return func(t *testing.T) *chaosDB {
			db := chaosPgxAt(t, poolerURL, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			db.writeBehind = writeBehind
			return db
		}
	}
	for _, c := range []struct {
		name string
		open func(t *testing.T) *chaosDB
	}{
		{"pgx/exec", pgxMode(pgx.QueryExecModeExec, false)},
		{"pgx/simple-protocol/write-behind", pgxMode(pgx.QueryExecModeSimpleProtocol, true)},
		{"database-sql/exec", func(t *testing.T) *chaosDB {
			return chaosStdlibPostgresAt(t, withQuery(t, poolerURL, "default_query_exec_mode", "exec"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) { runChaos(t, c.open(t), orders) })
	}
}

// The marks and the relay through PgBouncer in transaction mode, on both PostgreSQL stores in
// every mode that works there, claim-first and write-behind: the marks' batched UPDATE and
// each relay pass are transactions of their own, so no statement meets another server
// connection than its transaction's (testRelayAndMarks: a record published and marked, its
// duplicate publishing nothing, a dropped message's record published by the relay).
func TestPoolerRelayAndMarks(t *testing.T) {
	t.Parallel()
	stores := poolerBackends(testenv.PgBouncerURL(t, poolerServerConns))
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			b := stores[name](t)
			for _, writeBehind := range []bool{false, true} {
				t.Run(map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
					testRelayAndMarks(t, b, writeBehind)
				})
			}
		})
	}
}

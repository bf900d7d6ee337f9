package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
)

// The pgx store sends batches and prepares statements by name: the guarantees must not
// depend on the pool's query execution mode, whichever a team sets. The store cases run in
// every mode, and so does the write-behind path.
func TestPgxEveryQueryExecMode(t *testing.T) {
	modes := map[string]pgx.QueryExecMode{
		"cache-describe": pgx.QueryExecModeCacheDescribe,
		"describe-exec":  pgx.QueryExecModeDescribeExec,
		"exec":           pgx.QueryExecModeExec,
		"simple":         pgx.QueryExecModeSimpleProtocol,
	}
	// Every case but the thousand messages (a mode changes no concurrency) and the handler
	// panic (which the middleware handles before the store).
	suiteCases := []string{
		"first delivery commits claim and business row together",
		"sequential duplicate is skipped and not an error",
		"concurrent copies of one message",
		"handler error releases the claim",
		"failed commit is a nack",
		"failed commits and rollbacks end their transactions",
		"two consumers each process a message once",
		"bad keys and missing consumer",
		"database outage then recovery",
		"table names are validated, message data is parameterised",
		"InitializeSchema is idempotent",
		"keys compare byte for byte",
		"a table that cannot guard is refused",
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			newBackend := func(t *testing.T) *backend {
				return pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			}
			harness := func(t *testing.T) *inboxtest.Harness { return newBackend(t).harness() }
			inboxtest.Run(t, harness, inboxtest.Options{Cases: suiteCases})
			t.Run("write-behind", func(t *testing.T) {
				inboxtest.Run(t, harness, inboxtest.Options{Cases: suiteCases, Config: inbox.Config{WriteBehind: true}})
			})
			t.Run("write-behind unique error", func(t *testing.T) { testWriteBehindUniqueViolation(t, newBackend(t)) })
		})
	}
}

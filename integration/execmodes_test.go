package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/inboxtest"
)

// The pgx store sends batches and prepares statements by name: the guarantees must not
// depend on the pool's query execution mode, whichever a team sets. The store cases that
// exercise claims, duplicates, rollbacks and commits run in every mode, and so does the
// write-behind path.
func TestPgxEveryQueryExecMode(t *testing.T) {
	modes := map[string]pgx.QueryExecMode{
		"cache-describe": pgx.QueryExecModeCacheDescribe,
		"describe-exec":  pgx.QueryExecModeDescribeExec,
		"exec":           pgx.QueryExecModeExec,
		"simple":         pgx.QueryExecModeSimpleProtocol,
	}
	suiteCases := []string{
		"first delivery commits claim and business row together",
		"sequential duplicate is skipped and not an error",
		"concurrent copies of one message",
		"handler error releases the claim",
		"failed commit is a nack",
	}
	cases := map[string]func(t *testing.T, b *backend){
		"write-behind copies":       testWriteBehindConcurrentCopies,
		"write-behind unique error": testWriteBehindUniqueViolation,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			newBackend := func(t *testing.T) *backend {
				return pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			}
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness { return newBackend(t).harness() },
				inboxtest.Options{Cases: suiteCases})
			for caseName, run := range cases {
				t.Run(caseName, func(t *testing.T) { run(t, newBackend(t)) })
			}
		})
	}
}

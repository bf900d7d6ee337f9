package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	cases := map[string]func(t *testing.T, b *backend){
		"first delivery":            testFirstDelivery,
		"sequential duplicate":      testSequentialDuplicate,
		"concurrent copies":         testConcurrentCopies,
		"handler error":             testHandlerError,
		"failed commit":             testCommitFailure,
		"write-behind copies":       testWriteBehindConcurrentCopies,
		"write-behind unique error": testWriteBehindUniqueViolation,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			for caseName, run := range cases {
				t.Run(caseName, func(t *testing.T) {
					run(t, pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode }))
				})
			}
		})
	}
}

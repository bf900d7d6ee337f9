package inbox_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/pgtest"
)

// TestMain skips Example, which runs against PostgreSQL, when PostgreSQL does not answer:
// an Example cannot skip itself. With INBOX_TEST_REQUIRE_SERVICES=1 that fails instead, as
// every test needing a service does.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := pgtest.Answers(); err != nil {
		if pgtest.RequireServices() {
			fmt.Fprintf(os.Stderr, "Example needs PostgreSQL (INBOX_TEST_REQUIRE_SERVICES=1): %v; set %s\n", err, pgtest.URLVar)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "skipping Example: PostgreSQL does not answer (%v); set %s\n", err, pgtest.URLVar)
		skip := "^Example$"
		if current := flag.Lookup("test.skip").Value.String(); current != "" {
			skip = current + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// examplePostgresURL is where Example finds PostgreSQL: INBOX_TEST_POSTGRES_URL, else the
// local default.
func examplePostgresURL() string { return pgtest.URL() }

// exampleName is a table name no other run uses.
func exampleName(prefix string) string { return pgtest.Name("example_" + prefix) }

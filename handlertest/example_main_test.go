package handlertest_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/pgtest"
)

// TestMain skips the Example functions, which run against PostgreSQL, when PostgreSQL does
// not answer: an Example cannot skip itself. With INBOX_TEST_REQUIRE_SERVICES=1 that fails
// instead, as every test needing a service does.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := pgtest.Answers(); err != nil {
		if pgtest.RequireServices() {
			fmt.Fprintf(os.Stderr, "the examples need PostgreSQL (INBOX_TEST_REQUIRE_SERVICES=1): %v; set %s\n", err, pgtest.URLVar)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "skipping the examples: PostgreSQL does not answer (%v); set %s\n", err, pgtest.URLVar)
		skip := "^Example"
		if current := flag.Lookup("test.skip").Value.String(); current != "" {
			skip = current + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

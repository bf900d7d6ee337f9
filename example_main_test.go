package inbox_test

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestMain skips Example, which runs against PostgreSQL, when PostgreSQL does not answer:
// an Example cannot skip itself. With INBOX_TEST_REQUIRE_SERVICES=1 that fails instead, as
// every test needing a service does.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := examplePostgresAnswers(); err != nil {
		if testenv.RequireServices() {
			fmt.Fprintf(os.Stderr, "Example needs PostgreSQL (INBOX_TEST_REQUIRE_SERVICES=1): %v; set %s\n", err, testenv.PostgresURLVar)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "skipping Example: PostgreSQL does not answer (%v); set %s\n", err, testenv.PostgresURLVar)
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
func examplePostgresURL() string {
	if u := os.Getenv(testenv.PostgresURLVar); u != "" {
		return u
	}
	return testenv.DefaultPostgresURL
}

func examplePostgresAnswers() error {
	u, err := url.Parse(examplePostgresURL())
	if err != nil {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// exampleName is a table name no other run uses.
func exampleName(prefix string) string { return testenv.Name("example_" + prefix) }

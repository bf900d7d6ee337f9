// Package pgtest is the library module's own test environment: where its tests find
// PostgreSQL, and names no other run uses. It is what the library's tests need of
// internal/testenv, the test environment of the repository's other modules, which is a module
// of its own: the library cannot require it without putting it in the module graph of every
// program that requires the library.
//
// The variables are testenv's: INBOX_TEST_POSTGRES_URL, and INBOX_TEST_REQUIRE_SERVICES=1 to
// fail rather than skip a test whose PostgreSQL does not answer.
package pgtest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// URLVar names the variable that overrides DefaultURL.
const (
	URLVar     = "INBOX_TEST_POSTGRES_URL"
	DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// RequireServices reports whether a PostgreSQL that does not answer fails the test instead of
// skipping it.
func RequireServices() bool { return os.Getenv("INBOX_TEST_REQUIRE_SERVICES") == "1" }

// URL returns the PostgreSQL URL of URLVar, or DefaultURL.
func URL() string {
	if u := os.Getenv(URLVar); u != "" {
		return u
	}
	return DefaultURL
}

// Answers dials the server of URL, and returns why it does not answer, or nil.
func Answers() error {
	u, err := url.Parse(URL())
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

// Need returns URL, or skips tb (fails it, under RequireServices) if nothing answers there.
func Need(tb testing.TB) string {
	tb.Helper()
	if err := Answers(); err != nil {
		if RequireServices() {
			tb.Fatalf("PostgreSQL is required (INBOX_TEST_REQUIRE_SERVICES=1) but does not answer: %v; set %s", err, URLVar)
		}
		tb.Skipf("PostgreSQL does not answer (%v); set %s, or start it (docker compose up)", err, URLVar)
	}
	return URL()
}

// Name returns prefix followed by a random suffix: a table name that no other test run uses.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

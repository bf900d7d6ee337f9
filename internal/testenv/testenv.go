// Package testenv tells tests where the services are and what to do when one is missing.
//
// Each address comes from an environment variable with a local default. A service that does
// not answer skips the test, unless INBOX_TEST_REQUIRE_SERVICES=1 (as in CI): then the test
// fails, so a missing service can never pass for a green run.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Service addresses: the variable that overrides each, and its default.
const (
	PostgresURLVar = "INBOX_TEST_POSTGRES_URL"
	MySQLDSNVar    = "INBOX_TEST_MYSQL_DSN"
	AMQPURLVar     = "INBOX_TEST_AMQP_URL"
	NATSURLVar     = "INBOX_TEST_NATS_URL"
	RedisAddrVar   = "INBOX_TEST_REDIS_ADDR"

	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQLDSN    = "root@tcp(127.0.0.1:3306)/test?parseTime=true&interpolateParams=true"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultRedisAddr   = "127.0.0.1:6379"
)

// RequireServices reports whether a missing service fails the test instead of skipping it.
func RequireServices() bool { return os.Getenv("INBOX_TEST_REQUIRE_SERVICES") == "1" }

// PostgresURL returns the PostgreSQL URL for tests, or skips (fails) t if nothing listens there.
func PostgresURL(t testing.TB) string {
	u := get(PostgresURLVar, DefaultPostgresURL)
	need(t, "PostgreSQL", PostgresURLVar, hostOfURL(u, "5432"))
	return u
}

// MySQLDSN returns the MySQL/MariaDB DSN (go-sql-driver/mysql form) for tests, or skips
// (fails) t if nothing listens there.
func MySQLDSN(t testing.TB) string {
	dsn := get(MySQLDSNVar, DefaultMySQLDSN)
	need(t, "MySQL/MariaDB", MySQLDSNVar, hostOfMySQLDSN(dsn))
	return dsn
}

// AMQPURL returns the RabbitMQ URL for tests, or skips (fails) t.
func AMQPURL(t testing.TB) string {
	u := get(AMQPURLVar, DefaultAMQPURL)
	need(t, "RabbitMQ", AMQPURLVar, hostOfURL(u, "5672"))
	return u
}

// NATSURL returns the NATS URL for tests, or skips (fails) t.
func NATSURL(t testing.TB) string {
	u := get(NATSURLVar, DefaultNATSURL)
	need(t, "NATS", NATSURLVar, hostOfURL(u, "4222"))
	return u
}

// RedisAddr returns the Redis address (host:port) for tests, or skips (fails) t.
func RedisAddr(t testing.TB) string {
	addr := get(RedisAddrVar, DefaultRedisAddr)
	need(t, "Redis", RedisAddrVar, addr)
	return addr
}

// Name returns prefix followed by a random suffix: a table, topic or stream name that no
// other test run uses.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

func get(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

func need(t testing.TB, service, variable, hostPort string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", hostPort, 2*time.Second)
	if err == nil {
		conn.Close()
		return
	}
	if RequireServices() {
		t.Fatalf("%s is required (INBOX_TEST_REQUIRE_SERVICES=1) but %s does not answer: %v; set %s",
			service, hostPort, err, variable)
	}
	t.Skipf("%s not reachable at %s (%v); set %s, or start it (docker compose up)", service, hostPort, err, variable)
}

func hostOfURL(raw, defaultPort string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), defaultPort)
	}
	return u.Host
}

// hostOfMySQLDSN finds the address in "user:pass@tcp(host:port)/db?...".
func hostOfMySQLDSN(dsn string) string {
	start, end := -1, -1
	for i := 0; i < len(dsn); i++ {
		if start < 0 && i+4 <= len(dsn) && dsn[i:i+4] == "tcp(" {
			start = i + 4
		}
		if start >= 0 && dsn[i] == ')' {
			end = i
			break
		}
	}
	if start < 0 || end < 0 {
		return "127.0.0.1:3306"
	}
	return dsn[start:end]
}

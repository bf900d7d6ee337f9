package inboxcli

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// execModeOption is pgx's DSN option that chooses how statements are sent.
const execModeOption = "default_query_exec_mode"

// Postgres is PostgreSQL through pgx's database/sql driver: postgres:// and postgresql:// URLs,
// or, with -dialect postgres, a keyword/value DSN ("host=db dbname=app").
//
// Unless the DSN chooses a mode (default_query_exec_mode), the command sends its statements
// in pgx's exec mode, which keeps no prepared statement on the server: pgx's default caches
// statements by name on the server connection, and through a pooler in transaction mode
// (PgBouncer) the next run meets a server connection that holds them already and fails
// with "prepared statement ... already exists" (SQLSTATE 42P05). The command runs a few
// statements once each, so the cache saves nothing.
func Postgres() Dialect {
	return Dialect{
		shipped: true,
		Dialect: sqlinbox.Postgres{},
		Names:   []string{"postgres", "postgresql"},
		Open: func(dsn string, _ bool) (*sql.DB, error) {
			dsn = withExecMode(dsn)
			// pgx parses the DSN only when it connects: parse it first, so that a malformed
			// one is bad usage (exit 2), not a failed connection.
			if _, err := pgx.ParseConfig(dsn); err != nil {
				return nil, usageError{fmt.Errorf("bad PostgreSQL DSN `%s`: %s", redactDSN(dsn), parseReason(err))}
			}
			return sql.Open("pgx", dsn)
		},
		Hint: postgresHint,
	}
}

// parseReason is why pgx refused a DSN, without the DSN, which its error repeats.
func parseReason(err error) string {
	msg := err.Error()
	var parseErr *pgconn.ParseConfigError
	if errors.As(err, &parseErr) {
		if _, reason, found := strings.Cut(msg, "`: "); found {
			return reason
		}
	}
	return msg
}

// withExecMode adds default_query_exec_mode=exec to dsn, a URL or a keyword/value DSN, unless
// it sets the option.
func withExecMode(dsn string) string {
	if strings.Contains(dsn, execModeOption) {
		return dsn
	}
	if !strings.Contains(dsn, "://") {
		return strings.TrimSpace(dsn) + " " + execModeOption + "=exec"
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // pgx reports the bad URL
	}
	query := u.Query()
	query.Set(execModeOption, "exec")
	u.RawQuery = query.Encode()
	return u.String()
}

// postgresHint names the option for the errors of a statement cache behind a pooler in
// transaction mode: a prepared statement that exists already on the server connection, or
// does not exist on it.
func postgresHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
		return "through a pooler in transaction mode, set " + execModeOption + "=exec in the DSN, or leave the option out: the command then uses exec"
	}
	return ""
}

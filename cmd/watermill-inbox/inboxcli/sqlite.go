package inboxcli

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// SQLite is SQLite through modernc.org/sqlite: sqlite://path, sqlite3://path, file: URIs, or,
// with -dialect sqlite, a bare path. A busy timeout of 10 s is added unless the DSN sets one,
// so that a cleanup waits for the service's writers instead of failing. A file that does not
// exist is an error, except for migrate, which creates it.
func SQLite() Dialect {
	return Dialect{
		shipped:  true,
		Dialect:  sqlinbox.SQLite{},
		Names:    []string{"sqlite", "sqlite3"},
		Prefixes: []string{"file:"},
		Open: func(dsn string, create bool) (*sql.DB, error) {
			dsn, err := sqliteDSN(dsn, create)
			if err != nil {
				return nil, err
			}
			return sql.Open("sqlite", dsn)
		},
	}
}

// sqliteDSN turns sqlite://path, file:path or a bare path into a modernc.org/sqlite DSN with
// a busy timeout. SQLite creates a missing file on open: unless the command creates the
// schema, a file that does not exist is an error, so that a typo in the path does not leave
// an empty database behind.
func sqliteDSN(dsn string, create bool) (string, error) {
	for _, prefix := range []string{"sqlite://", "sqlite3://"} {
		if strings.HasPrefix(strings.ToLower(dsn), prefix) {
			dsn = dsn[len(prefix):]
		}
	}
	dsn = strings.TrimPrefix(dsn, "file:")
	path, query, _ := strings.Cut(dsn, "?")
	inMemory := path == "" || path == ":memory:" || strings.Contains(query, "mode=memory")
	if !create && !inMemory {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("SQLite database %s does not exist (create it with \"watermill-inbox migrate\")", path)
		}
	}
	dsn = "file:" + dsn
	if !strings.Contains(query, "busy_timeout") {
		sep := "?"
		if query != "" {
			sep = "&"
		}
		dsn += sep + "_pragma=busy_timeout(10000)"
	}
	return dsn, nil
}

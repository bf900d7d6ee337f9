package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"   // the "mysql" driver the openers name, and its DSN parser
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// opener is a dialect and how the command opens it.
type opener struct {
	// names are the -dialect values that select it; each is also a DSN scheme (name://).
	names []string
	// prefixes are other DSN prefixes that select it ("file:").
	prefixes []string
	dialect  sqlinbox.Dialect
	// driver is the database/sql driver; dsn turns a DSN as given into the driver's form.
	// creates: the command creates the schema (and may create the database with it).
	driver string
	dsn    func(dsn string, creates bool) (string, error)
}

// openers is the one table of the dialects the command knows, and of their names.
var openers = []opener{
	{[]string{"postgres", "postgresql"}, nil, sqlinbox.Postgres(), "pgx", func(dsn string, _ bool) (string, error) { return dsn, nil }},
	{[]string{"mysql", "mariadb"}, nil, sqlinbox.MySQL(), "mysql", mysqlDSN},
	{[]string{"sqlite", "sqlite3"}, []string{"file:"}, sqlinbox.SQLite(), "sqlite", sqliteDSN},
}

// lookup returns the opener that name (a -dialect value) selects.
func lookup(name string) (opener, bool) {
	for _, o := range openers {
		if slices.Contains(o.names, strings.ToLower(name)) {
			return o, true
		}
	}
	return opener{}, false
}

// schemeOf returns the opener a DSN's scheme selects.
func schemeOf(dsn string) (opener, bool) {
	lower := strings.ToLower(dsn)
	for _, o := range openers {
		for _, name := range o.names {
			if strings.HasPrefix(lower, name+"://") {
				return o, true
			}
		}
		for _, prefix := range o.prefixes {
			if strings.HasPrefix(lower, prefix) {
				return o, true
			}
		}
	}
	return opener{}, false
}

// dialectNames lists the first name of every dialect: "postgres, mysql or sqlite".
func dialectNames() string {
	var names []string
	for _, o := range openers {
		names = append(names, o.names[0])
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// mysqlDSN turns mysql://DSN or mariadb://DSN into a go-sql-driver/mysql DSN.
func mysqlDSN(dsn string, _ bool) (string, error) {
	dsn = strings.TrimPrefix(dsn, "mysql://")
	dsn = strings.TrimPrefix(dsn, "mariadb://")
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("bad MySQL DSN (want mysql://user:password@tcp(host:3306)/database): %w", err)
	}
	return dsn, nil
}

// sqliteDSN turns sqlite://path, file:path or a bare path into a modernc.org/sqlite DSN with
// a busy timeout, so the cleanup waits for the service's writers instead of failing. SQLite
// creates a missing file on open: unless the command creates the schema, a file that does
// not exist is an error, so that a typo in the path does not leave an empty database behind.
func sqliteDSN(dsn string, creates bool) (string, error) {
	for _, prefix := range []string{"sqlite://", "sqlite3://"} {
		if strings.HasPrefix(strings.ToLower(dsn), prefix) {
			dsn = dsn[len(prefix):]
		}
	}
	dsn = strings.TrimPrefix(dsn, "file:")
	path, query, _ := strings.Cut(dsn, "?")
	inMemory := path == "" || path == ":memory:" || strings.Contains(query, "mode=memory")
	if !creates && !inMemory {
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

package inboxcli

import (
	"fmt"
	"os"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// target is the database and table a command works on.
type target struct {
	dsn, dialectName, table string
}

// resolve returns the dialect and the DSN as given. needDSN is false for schema, which only
// needs the dialect.
func (c *command) resolve(needDSN bool) (d Dialect, dsn string, err error) {
	t := c.target
	if err := sqlinbox.ValidateTableName(t.table); err != nil {
		return d, "", usageError{fmt.Errorf("-table: %w", err)}
	}
	dsn = t.dsn
	if dsn == "" && (needDSN || t.dialectName == "") {
		dsn = os.Getenv(dsnVar)
	}
	fromScheme, hasScheme := c.cli.dialects.schemeOf(dsn)
	switch {
	case t.dialectName != "":
		var ok bool
		if d, ok = c.cli.dialects.lookup(t.dialectName); !ok {
			return d, "", usagef("unknown dialect %q: use %s", t.dialectName, c.cli.dialects.names())
		}
		if hasScheme && d.shipped && fromScheme.shipped && fromScheme.Names[0] != d.Names[0] {
			return d, "", usagef("-dialect %s does not match the DSN's scheme, which names %s", t.dialectName, fromScheme.Names[0])
		}
	case hasScheme:
		d = fromScheme
	case dsn == "":
		return d, "", usagef("no database: set -dsn or %s, or -dialect for schema", dsnVar)
	default:
		return d, "", usagef("cannot tell the dialect from the DSN: start it with %s, or set -dialect", c.cli.dialects.schemes())
	}
	// The dialect's own rules too: SQLite refuses a schema.
	if _, err := d.Dialect.ParseTable(t.table); err != nil {
		return d, "", usageError{fmt.Errorf("-table: %w", err)}
	}
	if needDSN && dsn == "" {
		return d, "", usagef("no database: set -dsn or %s", dsnVar)
	}
	c.cli.resolved, c.cli.dsn = &d, dsn
	return d, dsn, nil
}

package main

import (
	"fmt"
	"os"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// target is the database and table a command works on.
type target struct {
	dsn, dialectName, table string
}

// resolve returns the dialect, the driver and the DSN in the driver's form. needDSN is false
// for schema, which only needs the dialect; creates is true for migrate.
func (t *target) resolve(needDSN, creates bool) (dialect sqlinbox.Dialect, driver, dsn string, err error) {
	if err := sqlinbox.ValidateTableName(t.table); err != nil {
		return dialect, "", "", usageError{fmt.Errorf("-table: %w", err)}
	}
	dsn = t.dsn
	if dsn == "" && (needDSN || t.dialectName == "") {
		dsn = os.Getenv(dsnVar)
	}
	fromScheme, hasScheme := schemeOf(dsn)
	var o opener
	switch {
	case t.dialectName != "":
		var ok bool
		if o, ok = lookup(t.dialectName); !ok {
			return dialect, "", "", usagef("unknown dialect %q: use %s", t.dialectName, dialectNames())
		}
		if hasScheme && fromScheme.dialect.Name() != o.dialect.Name() {
			return dialect, "", "", usagef("-dialect %s does not match the DSN's scheme, which names %s", t.dialectName, fromScheme.dialect.Name())
		}
	case hasScheme:
		o = fromScheme
	case dsn == "":
		return dialect, "", "", usagef("no database: set -dsn or %s, or -dialect for schema", dsnVar)
	default:
		return dialect, "", "", usagef("cannot tell the dialect from the DSN: start it with postgres://, mysql:// or sqlite://, or set -dialect")
	}
	dialect = o.dialect
	// The dialect's own rules too: SQLite refuses a schema.
	if _, err := dialect.ParseTable(t.table); err != nil {
		return dialect, "", "", usageError{fmt.Errorf("-table: %w", err)}
	}
	if !needDSN {
		return dialect, "", "", nil
	}
	if dsn == "" {
		return dialect, "", "", usagef("no database: set -dsn or %s", dsnVar)
	}
	if dsn, err = o.dsn(dsn, creates); err != nil {
		return dialect, "", "", err
	}
	return dialect, o.driver, dsn, nil
}

package inboxcli

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Dialect is a database the command works on: the library's dialect of it and how the
// command opens a database of it from a DSN. Postgres, MySQL and SQLite return the ones the
// watermill-inbox command ships, each defined in a file of its own; a build of the command
// of one's own passes others to Main with them.
type Dialect struct {
	// Dialect is the SQL of the database: the store the commands build on the table, and the
	// DDL schema writes. Required.
	Dialect sqlinbox.Dialect

	// Names are the values of -dialect that select it, each also a DSN scheme that does
	// (name://...), compared without case; the usage lists the first. A -dialect given
	// selects its dialect whatever the DSN's scheme, so that a dialect of one's own can take
	// a postgres:// DSN beside Postgres (only a shipped dialect named with another shipped
	// one's scheme is refused, as a mistake). Dialect.Name() is
	// always one of them (the table check's messages name it so); no two dialects share one.
	Names []string
	// Prefixes are other beginnings of a DSN that select it, compared without case
	// ("file:"); none by default.
	Prefixes []string

	// Open returns the database of dsn, as given on the command line (its scheme
	// included): the DSN turned into its driver's form and opened with database/sql. It
	// need not connect; the command pings the database next. create is true for the command
	// that creates the table (migrate), which may create the database with it (a SQLite
	// file); otherwise a database that does not exist is an error, so that a typo does not
	// create one. Required.
	Open func(dsn string, create bool) (*sql.DB, error)

	// Hint, if set, returns what to add to the message of err, an error of a command on this
	// database, when that helps the user fix it ("" for nothing): the DSN option a failure
	// needs, say.
	Hint func(err error) string

	// shipped is set by Postgres, MySQL and SQLite: a -dialect naming one of them with the
	// DSN scheme of another is a mistake, while a dialect of one's own may take any DSN.
	shipped bool
}

// dialects are the dialects of one run of the command, in the order given to Main.
type dialects []Dialect

// newDialects checks the dialects given to Main and adds each one's Name to its Names.
func newDialects(given []Dialect) (dialects, error) {
	if len(given) == 0 {
		return nil, errors.New("no dialect: give Main at least one (inboxcli.Postgres(), ...)")
	}
	seen := map[string]bool{}
	ds := make(dialects, 0, len(given))
	for i, d := range given {
		if d.Dialect == nil || d.Open == nil {
			return nil, fmt.Errorf("dialect %d of Main: Dialect and Open are required", i+1)
		}
		// sqlinbox refuses a dialect that embeds a nil one before any method of it is called.
		if _, err := sqlinbox.SchemaSQL(d.Dialect, sqlinbox.DefaultTable); err != nil {
			return nil, fmt.Errorf("dialect %d of Main: %w", i+1, err)
		}
		names := []string{}
		for _, name := range append(slices.Clone(d.Names), d.Dialect.Name()) {
			name = strings.ToLower(name)
			if slices.Contains(names, name) {
				continue
			}
			if name == "" || seen[name] {
				return nil, fmt.Errorf("dialect %q of Main: name %q is empty or another dialect's", d.Dialect.Name(), name)
			}
			seen[name] = true
			names = append(names, name)
		}
		d.Names = names
		ds = append(ds, d)
	}
	return ds, nil
}

// lookup returns the dialect that name (a -dialect value) selects.
func (ds dialects) lookup(name string) (Dialect, bool) {
	for _, d := range ds {
		if slices.Contains(d.Names, strings.ToLower(name)) {
			return d, true
		}
	}
	return Dialect{}, false
}

// schemeOf returns the dialect a DSN's scheme or prefix selects.
func (ds dialects) schemeOf(dsn string) (Dialect, bool) {
	lower := strings.ToLower(dsn)
	for _, d := range ds {
		for _, name := range d.Names {
			if strings.HasPrefix(lower, name+"://") {
				return d, true
			}
		}
		for _, prefix := range d.Prefixes {
			if strings.HasPrefix(lower, strings.ToLower(prefix)) {
				return d, true
			}
		}
	}
	return Dialect{}, false
}

// names lists the first name of every dialect: "postgres, mysql or sqlite".
func (ds dialects) names() string {
	var names []string
	for _, d := range ds {
		names = append(names, d.Names[0])
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// schemes lists the DSN schemes: "postgres://, mysql:// or sqlite://".
func (ds dialects) schemes() string {
	var schemes []string
	for _, d := range ds {
		schemes = append(schemes, d.Names[0]+"://")
	}
	if len(schemes) == 1 {
		return schemes[0]
	}
	return strings.Join(schemes[:len(schemes)-1], ", ") + " or " + schemes[len(schemes)-1]
}

// hint returns what the dialect adds to err's message, with a separator, or "".
func (d Dialect) hint(err error) string {
	if d.Hint == nil {
		return ""
	}
	if h := d.Hint(err); h != "" {
		return " (" + h + ")"
	}
	return ""
}

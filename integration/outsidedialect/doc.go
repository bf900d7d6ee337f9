// Package outsidedialect holds dialects written as a user of package sqlinbox writes one,
// outside the library and through its public API only: each embeds a shipped dialect by value
// and overrides one method. Its tests run the conformance suite, the table check, retention,
// the command line and the MySQL security cases on them.
package outsidedialect

import "github.com/inboxkit/watermill-inbox/sqlinbox"

// Postgres is PostgreSQL under a name of its own.
type Postgres struct{ sqlinbox.Postgres }

// Name names the dialect.
func (Postgres) Name() string { return "mypostgres" }

// MySQL is MySQL and MariaDB under a name of its own.
type MySQL struct{ sqlinbox.MySQL }

// Name names the dialect.
func (MySQL) Name() string { return "mymysql" }

// SQLite is SQLite under a name of its own.
type SQLite struct{ sqlinbox.SQLite }

// Name names the dialect.
func (SQLite) Name() string { return "mysqlite" }

// Embedded embeds the Dialect interface rather than a shipped dialect: its zero value has no
// dialect inside, which the store must refuse with an error rather than a panic.
type Embedded struct{ sqlinbox.Dialect }

// Name names the dialect.
func (Embedded) Name() string { return "embedded" }

package sqlinbox

import (
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Dialect is the SQL one database speaks: the statements a store sends, rendered as strings
// so they can be read and tested without a database. Use the values Postgres, MySQL and
// SQLite; the zero Dialect is invalid.
type Dialect struct {
	name string
	// claim inserts (consumer, message_id) and skips only a conflict on the primary key;
	// %s is the quoted table. It must report 1 affected row for a new claim, 0 for a
	// duplicate.
	claim string
	// schemaLock, when set, serialises InitializeSchema across instances that start at once
	// (PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when two run concurrently).
	schemaLock string
}

var (
	// Postgres is PostgreSQL: INSERT ... ON CONFLICT (consumer, message_id) DO NOTHING.
	Postgres = Dialect{
		name:       inbox.DialectPostgres,
		claim:      `INSERT INTO %s (consumer, message_id) VALUES ($1, $2) ON CONFLICT (consumer, message_id) DO NOTHING`,
		schemaLock: `SELECT pg_advisory_xact_lock(7061261737466313)`,
	}

	// MySQL is MySQL and MariaDB with InnoDB. The claim is INSERT ... ON DUPLICATE KEY UPDATE
	// with a no-op assignment, which skips the duplicate key and nothing else (INSERT IGNORE
	// would turn other errors into warnings). It reads the affected-row count, so the DSN
	// must not set clientFoundRows=true. Set interpolateParams=true in go-sql-driver/mysql's
	// DSN to save the prepare round trips of every statement.
	MySQL = Dialect{
		name:  inbox.DialectMySQL,
		claim: "INSERT INTO %s (consumer, message_id) VALUES (?, ?) ON DUPLICATE KEY UPDATE consumer = consumer",
	}

	// SQLite is SQLite 3.24 or later: INSERT ... ON CONFLICT (consumer, message_id) DO NOTHING.
	// Open the database with a busy timeout (modernc.org/sqlite: _pragma=busy_timeout(5000))
	// so concurrent writers wait for each other instead of failing with SQLITE_BUSY. The
	// claim is the transaction's first statement, so it takes the write lock at once.
	SQLite = Dialect{
		name:  inbox.DialectSQLite,
		claim: `INSERT INTO %s (consumer, message_id) VALUES (?, ?) ON CONFLICT (consumer, message_id) DO NOTHING`,
	}
)

// String returns the dialect's name: "postgres", "mysql" or "sqlite".
func (d Dialect) String() string { return d.name }

func (d Dialect) validate() error {
	if d.name == "" {
		return fmt.Errorf("sqlinbox: no dialect: use sqlinbox.Postgres, sqlinbox.MySQL or sqlinbox.SQLite")
	}
	return nil
}

// ClaimSQL returns the statement that claims a key in table, with the consumer and the key
// as its two parameters.
func ClaimSQL(dialect Dialect, table string) (string, error) {
	if err := dialect.validate(); err != nil {
		return "", err
	}
	quoted, err := inbox.QuoteTableName(dialect.name, table)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(dialect.claim, quoted), nil
}

// SchemaSQL returns the statement that creates the inbox table in dialect if it does not
// exist, for teams that run their own migrations. The DDL itself is defined in the inbox
// package (inbox.CreateTableSQL).
func SchemaSQL(dialect Dialect, table string) (string, error) {
	if err := dialect.validate(); err != nil {
		return "", err
	}
	return inbox.CreateTableSQL(dialect.name, table)
}

package sqlinbox

import (
	"fmt"
	"strconv"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Dialect is the SQL one database speaks: the statements a store sends, rendered as strings
// so they can be read and tested without a database. Use the values Postgres, MySQL and
// SQLite; the zero Dialect is invalid.
type Dialect struct {
	name string
	// claim inserts (consumer, message_id, payload_hash) and skips only a conflict on the
	// primary key; %s is the quoted table. It must report 1 affected row for a new claim,
	// 0 for a duplicate.
	claim string
	// prior reads what the committed claim of (consumer, message_id) recorded. It is a
	// statement of its own, after the claim, so that it sees a row committed while the
	// claim waited for it.
	prior string
	// record stores the produced messages (first parameter) with the claim.
	record string
	// schemaLock, when set, serialises InitializeSchema across instances that start at once
	// (PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when two run concurrently).
	schemaLock string
}

var (
	// Postgres is PostgreSQL: INSERT ... ON CONFLICT (consumer, message_id) DO NOTHING.
	Postgres = Dialect{
		name:       inbox.DialectPostgres,
		claim:      `INSERT INTO %s (consumer, message_id, payload_hash) VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING`,
		prior:      `SELECT payload_hash, produced FROM %s WHERE consumer = $1 AND message_id = $2`,
		record:     `UPDATE %s SET produced = $1 WHERE consumer = $2 AND message_id = $3`,
		schemaLock: `SELECT pg_advisory_xact_lock(7061261737466313)`,
	}

	// MySQL is MySQL and MariaDB with InnoDB. The claim is INSERT ... ON DUPLICATE KEY UPDATE
	// with a no-op assignment, which skips the duplicate key and nothing else (INSERT IGNORE
	// would turn other errors into warnings). It reads the affected-row count, so the DSN
	// must not set clientFoundRows=true. Set interpolateParams=true in go-sql-driver/mysql's
	// DSN to save the prepare round trips of every statement.
	MySQL = Dialect{
		name:   inbox.DialectMySQL,
		claim:  "INSERT INTO %s (consumer, message_id, payload_hash) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE consumer = consumer",
		prior:  "SELECT payload_hash, produced FROM %s WHERE consumer = ? AND message_id = ?",
		record: "UPDATE %s SET produced = ? WHERE consumer = ? AND message_id = ?",
	}

	// SQLite is SQLite 3.24 or later: INSERT ... ON CONFLICT (consumer, message_id) DO NOTHING.
	// Open the database with a busy timeout (modernc.org/sqlite: _pragma=busy_timeout(5000))
	// so concurrent writers wait for each other instead of failing with SQLITE_BUSY. The
	// claim is the transaction's first statement, so it takes the write lock at once.
	SQLite = Dialect{
		name:   inbox.DialectSQLite,
		claim:  `INSERT INTO %s (consumer, message_id, payload_hash) VALUES (?, ?, ?) ON CONFLICT (consumer, message_id) DO NOTHING`,
		prior:  `SELECT payload_hash, produced FROM %s WHERE consumer = ? AND message_id = ?`,
		record: `UPDATE %s SET produced = ? WHERE consumer = ? AND message_id = ?`,
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

// lockTimeout returns the statement that bounds the transaction's lock waits by d.
func (d Dialect) lockTimeout(timeout time.Duration) (query string, args []any) {
	millis := max(timeout.Milliseconds(), 1)
	switch d.name {
	case inbox.DialectPostgres:
		// set_config(..., true) is SET LOCAL with a parameter: it ends with the transaction.
		return `SELECT set_config('lock_timeout', $1, true)`, []any{strconv.FormatInt(millis, 10) + "ms"}
	case inbox.DialectMySQL:
		// Whole seconds, at least 1; a session setting, kept by the connection.
		return "SET SESSION innodb_lock_wait_timeout = ?", []any{(millis + 999) / 1000}
	default:
		// A pragma takes no parameters; the value is a number we format.
		return "PRAGMA busy_timeout = " + strconv.FormatInt(millis, 10), nil
	}
}

// ClaimSQL returns the statement that claims a key in table; its parameters are the
// consumer, the key and the payload fingerprint.
func ClaimSQL(dialect Dialect, table string) (string, error) {
	return render(dialect, dialect.claim, table)
}

// SchemaSQL returns the script that creates the inbox table and its index in dialect if they
// do not exist, for teams that run their own migrations. The DDL itself is defined in the
// inbox package (inbox.SchemaStatements).
func SchemaSQL(dialect Dialect, table string) (string, error) {
	if err := dialect.validate(); err != nil {
		return "", err
	}
	return inbox.CreateTableSQL(dialect.name, table)
}

func render(dialect Dialect, statement, table string) (string, error) {
	if err := dialect.validate(); err != nil {
		return "", err
	}
	quoted, err := inbox.QuoteTableName(dialect.name, table)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(statement, quoted), nil
}

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
	// claimOrRead, where the dialect can, claims and reads a committed claim in one
	// statement: a row (true, ...) for a new claim, (false, hash, produced) for a committed
	// one the statement's snapshot sees, and no row for one committed while the claim
	// waited for it, which only prior, a statement of its own, can read.
	claimOrRead string
	// schemaLock, when set, serialises InitializeSchema across instances that start at once
	// (PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when two run concurrently).
	schemaLock string
	// cleanup deletes one batch of the oldest rows older than a retention, of every
	// consumer; its parameters are cleanupArgs. expired counts what cleanup would delete.
	// %[1]s is the quoted table.
	cleanup, expired string
	// cleanupLock tries, without waiting, to take the lock that lets one cleanup of a table
	// run at a time and returns 1 if it did; cleanupUnlock releases it. Both are session
	// locks: they hold on the connection that took them. Their parameter is the table name
	// (quoted on PostgreSQL, as written on MySQL). Empty: no lock (SQLite, whose single
	// writer serialises the batches anyway).
	cleanupLock, cleanupUnlock string
}

var (
	// Postgres is PostgreSQL: INSERT ... ON CONFLICT (consumer, message_id) DO NOTHING.
	Postgres = Dialect{
		name:   inbox.DialectPostgres,
		claim:  `INSERT INTO %s (consumer, message_id, payload_hash) VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING`,
		prior:  `SELECT payload_hash, produced FROM %s WHERE consumer = $1 AND message_id = $2`,
		record: `UPDATE %s SET produced = $1 WHERE consumer = $2 AND message_id = $3`,
		claimOrRead: `WITH claimed AS (
	INSERT INTO %[1]s (consumer, message_id, payload_hash) VALUES ($1, $2, $3)
	ON CONFLICT (consumer, message_id) DO NOTHING
	RETURNING true AS inserted
)
SELECT true, NULL::bytea, NULL::bytea FROM claimed
UNION ALL
SELECT false, payload_hash, produced FROM %[1]s
WHERE consumer = $1 AND message_id = $2 AND NOT EXISTS (SELECT FROM claimed)`,
		schemaLock: `SELECT pg_advisory_xact_lock(7061261737466313)`,
		// By ctid, the row's physical address: the subquery finds the batch through the
		// processed_at index, the DELETE goes straight to each row.
		cleanup: `DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2))`,
		expired: `SELECT count(*) FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond'`,
		// The key is the table's OID, so "inbox" and "public.inbox" share one lock; the
		// first int4 ("winb") keeps it apart from other advisory locks.
		cleanupLock:   `SELECT pg_try_advisory_lock(2003398242, $1::text::regclass::oid::int)::int`,
		cleanupUnlock: `SELECT pg_advisory_unlock(2003398242, $1::text::regclass::oid::int)::int`,
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
		// The processed_at index gives the oldest rows; LIMIT bounds the batch.
		cleanup: "DELETE FROM %[1]s WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?",
		expired: "SELECT COUNT(*) FROM %[1]s WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND",
		// Named locks are server-wide: the name holds the database and the table, hashed to
		// stay under the 64-character limit.
		cleanupLock:   "SELECT GET_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))), 0)",
		cleanupUnlock: "SELECT RELEASE_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))))",
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
		// The table is WITHOUT ROWID: delete by primary key.
		cleanup: `DELETE FROM %[1]s WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?) ORDER BY processed_at LIMIT ?)`,
		expired: `SELECT COUNT(*) FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?)`,
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

// CleanupSQL returns the statement that deletes one batch of rows older than a retention
// from table, in dialect. Its parameters are the retention (PostgreSQL and MySQL: whole
// microseconds as an integer; SQLite: a date modifier such as "-3600.000000 seconds") and
// the batch size. The cutoff is computed by the database's clock, the one that set
// processed_at.
func CleanupSQL(dialect Dialect, table string) (string, error) {
	return render(dialect, dialect.cleanup, table)
}

// cleanupArgs returns the parameters of the cleanup and expired statements: the retention,
// then (for cleanup) the batch size.
func (d Dialect) cleanupArgs(olderThan time.Duration, batchSize int) []any {
	var age any = olderThan.Microseconds()
	if d.name == inbox.DialectSQLite {
		micros := olderThan.Microseconds()
		age = fmt.Sprintf("-%d.%06d seconds", micros/1e6, micros%1e6)
	}
	if batchSize == 0 {
		return []any{age}
	}
	return []any{age, batchSize}
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

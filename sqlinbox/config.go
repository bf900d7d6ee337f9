package sqlinbox

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Config configures a store. The zero value is ready to use.
type Config struct {
	// Table is the inbox table, optionally qualified by a schema ("billing.inbox").
	// Default: "inbox". It is validated by the dialect (ValidateTableName) and quoted, so it keeps
	// the case it is written in.
	Table string

	// LockTimeout bounds how long the inbox transaction waits for a lock, above all a claim
	// waiting for a copy of the same message that another consumer instance holds in an open
	// transaction: past it the claim fails, the message is nacked and redelivered later,
	// instead of holding a connection for as long as the first copy is stuck.
	// Default 0: the database's own limit (PostgreSQL: lock_timeout, none by default;
	// MySQL: innodb_lock_wait_timeout, 50 s; SQLite: the DSN's busy_timeout).
	// It applies to the whole inbox transaction, the handler's statements included:
	// PostgreSQL sets lock_timeout for the transaction only (SET LOCAL), which is safe
	// behind a pooler in transaction mode; MySQL sets the session's innodb_lock_wait_timeout
	// in whole seconds and SQLite the connection's busy_timeout, both kept by the connection
	// afterwards (InnoDB has no per-transaction setting): through a pooler that shares
	// connections between clients, another client may inherit the MySQL value
	// (docs/pooler.md). It costs no round trip with pgx (it travels in the claim's batch)
	// and one statement with database/sql.
	LockTimeout time.Duration

	// MultiStatements makes a store made by New send a message in write-behind mode
	// (inbox.Config.WriteBehind) as one text of several statements: BEGIN, the claim, the
	// handler's queued statements, the record of produced messages and COMMIT in one round
	// trip instead of one each. The dialect must have a Batch (MySQL has), and the driver
	// must run several statements in one call with the parameters written into the text:
	// with go-sql-driver/mysql, multiStatements=true and interpolateParams=true in the DSN.
	// Without them every such message fails with an error that says so, and is nacked.
	// Queued statements must then hold no "?" other than their parameters. On a *sql.DB
	// opened on MySQLConnector it also shortens the claim-first mode: START TRANSACTION, the
	// lock timeout and the claim go as one text, and the queued statements, the record and
	// COMMIT as another (a handler that writes through the *sql.Tx: its statements and
	// COMMIT, one round trip each); on any other *sql.DB the claim-first mode is unchanged.
	// NewPgx refuses it: pgx sends a write-behind message in one batch without it.
	MultiStatements bool

	// Logger receives, at error level, each check that refuses the inbox table (see
	// ErrTableMismatch): once per check, not once per message. Default: watermill.NopLogger{}.
	Logger watermill.LoggerAdapter
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = inbox.DefaultTable
	}
}

func (c Config) validate() error {
	if c.LockTimeout < 0 {
		return fmt.Errorf("sqlinbox: negative LockTimeout %s", c.LockTimeout)
	}
	return nil
}

// statements is what a store sends, rendered once at construction.
type statements struct {
	dialect               Dialect
	table                 Table
	insert, prior, record string
	insertOrSkip          string    // "" where the dialect has none
	batch                 *BatchSQL // nil unless Config.MultiStatements
	// lockTimeout is empty when Config.LockTimeout is 0.
	lockTimeout     string
	lockTimeoutArgs []any
	schema          []string
	schemaLock      string
	cleanup         cleanupStatements
	// guard checks the table before the store's first claim; copies of statements share it.
	guard *tableGuard
}

func newStatements(dialect Dialect, config Config) (statements, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return statements{}, err
	}
	table, err := dialect.ParseTable(config.Table)
	if err != nil {
		return statements{}, err
	}
	s := statements{
		dialect:      dialect,
		table:        table,
		insert:       render(dialect.Insert, table),
		prior:        render(dialect.Prior, table),
		record:       render(dialect.Record, table),
		insertOrSkip: render(dialect.InsertOrSkip, table),
		schema:       dialect.Schema(table),
		schemaLock:   dialect.SchemaLock,
		cleanup:      newCleanupStatements(dialect, table),
		guard:        newTableGuard(config.Logger),
	}
	if config.MultiStatements {
		if dialect.Batch == nil {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q has no Batch: leave Config.MultiStatements false", dialect.Name)
		}
		s.batch = dialect.Batch
	}
	if config.LockTimeout > 0 {
		if dialect.LockTimeout == nil {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q has no LockTimeout: leave Config.LockTimeout 0", dialect.Name)
		}
		s.lockTimeout, s.lockTimeoutArgs = dialect.LockTimeout(config.LockTimeout)
	}
	return s, nil
}

// isDuplicateKey reports whether err, from the claim's insert, is the duplicate key.
func (s statements) isDuplicateKey(err error) bool { return s.dialect.IsDuplicateKey(err, s.table) }

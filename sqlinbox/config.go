package sqlinbox

import (
	"errors"
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
	// A Galera or Percona XtraDB Cluster node refuses it too: there a transaction aborted by
	// another node's write-set runs the rest of a text in autocommit, so before its first
	// text the store asks the server (wsrep_on) and, on such a node, fails every message
	// that needs a text with an error wrapping ErrMultiStatementsRefused. Leave it false on
	// Galera: the default claim-first mode, and write-behind a statement at a time, are
	// exactly once there (docs/replicated.md).
	MultiStatements bool

	// Begin, for a store made by New, begins each message's transaction with the
	// application's data layer instead of db.BeginTx, so that handlers get the data layer's
	// own transaction type (see Begin and BeginWith: *sqlx.Tx, bun.Tx). Default: db.BeginTx,
	// and handlers get the *sql.Tx. It cannot be combined with MultiStatements, whose
	// messages begin in a text of the store's own; NewPgx refuses it (handlers get pgx.Tx).
	Begin Begin

	// Logger receives, at error level, each check that refuses the inbox table (see
	// ErrTableMismatch) and the check that refuses MultiStatements on this server (see
	// ErrMultiStatementsRefused): once per check, not once per message. Default:
	// watermill.NopLogger{}.
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
	if c.Begin != nil && c.MultiStatements {
		return errors.New("sqlinbox: Config.Begin and Config.MultiStatements cannot be combined: " +
			"a multi-statement message begins its transaction in a text of the store's own; leave one of them unset")
	}
	return nil
}

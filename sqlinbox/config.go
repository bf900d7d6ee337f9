package sqlinbox

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// Config configures a store. The zero value is ready to use.
type Config struct {
	// Table is the inbox table, optionally qualified by a schema ("billing.inbox").
	// Default: "inbox". It is validated by the dialect ([ValidateTableName]) and quoted, so it keeps
	// the case it is written in.
	Table string

	// LockTimeout bounds how long the inbox transaction waits for a lock, above all a claim
	// waiting for a copy of the same message that another consumer instance holds in an open
	// transaction: past it the claim fails, the message is nacked and redelivered later,
	// instead of holding a connection for as long as the first copy is stuck.
	// Default 0: the database's own limit (PostgreSQL: lock_timeout, none by default;
	// [MySQL]: innodb_lock_wait_timeout, 50 s; [SQLite]: the DSN's busy_timeout).
	// It applies to the whole inbox transaction, the handler's statements included:
	// PostgreSQL sets lock_timeout for the transaction only (SET LOCAL), which is safe
	// behind a pooler in transaction mode; MySQL sets the session's innodb_lock_wait_timeout
	// in whole seconds and SQLite the connection's busy_timeout, both kept by the connection
	// afterwards (InnoDB has no per-transaction setting): through a pooler that shares
	// connections between clients, another client may inherit the MySQL value
	// (docs/pooler.md). It costs no round trip with pgx (it travels in the claim's batch)
	// and one statement with database/sql.
	LockTimeout time.Duration

	// Begin, for a store made by [NewDB], begins each message's transaction with the
	// application's data layer instead of db.BeginTx, so that handlers get the data layer's
	// own transaction type (see Begin and [BeginWith]: *sqlx.Tx, bun.Tx). Default: db.BeginTx,
	// and handlers get the *sql.Tx. [NewMultiStatement] refuses it (its messages begin in a
	// multi-statement request of the store's own), and so does [NewPgx] (handlers get pgx.Tx).
	Begin BeginFunc

	// Dialect, for a store made by [NewPgx] or [NewPgxPipeline], is the PostgreSQL dialect
	// the store speaks: a dialect of one's own that embeds [Postgres] by value and overrides
	// what differs (an UNLOGGED table, say). Default: Postgres{}. A dialect that does not
	// embed Postgres is refused, and so is the field on [NewDB] and [NewMultiStatement],
	// which take their dialect as an argument.
	Dialect Dialect

	// Logger receives, at error level, each check that refuses the inbox table (see
	// [ErrTableMismatch]) and the check that refuses [NewMultiStatement]'s store on this driver or
	// server (see [ErrMultiStatementRefused]): once per check, not once per message. Default:
	// [watermill.NopLogger]{}.
	Logger watermill.LoggerAdapter
}

// DefaultTable is the inbox table's name when [Config.Table] is empty.
const DefaultTable = "inbox"

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
}

func (c Config) validate() error {
	if c.LockTimeout < 0 {
		return fmt.Errorf("sqlinbox: negative LockTimeout %s", c.LockTimeout)
	}
	return nil
}

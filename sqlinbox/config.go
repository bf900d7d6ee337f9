package sqlinbox

import (
	"fmt"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Config configures a store. The zero value is ready to use.
type Config struct {
	// Table is the inbox table, optionally qualified by a schema ("billing.inbox").
	// Default: "inbox". It is validated by inbox.ValidateTableName and quoted, so it keeps
	// the case it is written in.
	Table string

	// LockTimeout bounds how long the inbox transaction waits for a lock, above all a claim
	// waiting for a copy of the same message that another consumer instance holds in an open
	// transaction: past it the claim fails, the message is nacked and redelivered later,
	// instead of holding a connection for as long as the first copy is stuck.
	// Default 0: the database's own limit (PostgreSQL: lock_timeout, none by default;
	// MySQL: innodb_lock_wait_timeout, 50 s; SQLite: the DSN's busy_timeout).
	// It applies to the whole inbox transaction, the handler's statements included:
	// PostgreSQL sets lock_timeout for the transaction; MySQL sets the session's
	// innodb_lock_wait_timeout in whole seconds and SQLite the connection's busy_timeout,
	// both kept by the connection afterwards. It costs no round trip with pgx (it travels in
	// the claim's batch) and one statement with database/sql.
	LockTimeout time.Duration
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
	claim, prior, record string
	claimOrRead          string // "" where the dialect has none
	// lockTimeout is empty when Config.LockTimeout is 0.
	lockTimeout     string
	lockTimeoutArgs []any
	schema          []string
	schemaLock      string
	cleanup         cleanupStatements
}

func newStatements(dialect Dialect, config Config) (statements, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return statements{}, err
	}
	var s statements
	for _, r := range []struct {
		dst       *string
		statement string
	}{
		{&s.claim, dialect.claim},
		{&s.prior, dialect.prior},
		{&s.record, dialect.record},
		{&s.claimOrRead, dialect.claimOrRead},
	} {
		if r.statement == "" {
			continue
		}
		var err error
		if *r.dst, err = render(dialect, r.statement, config.Table); err != nil {
			return statements{}, err
		}
	}
	schema, err := inbox.SchemaStatements(dialect.name, config.Table)
	if err != nil {
		return statements{}, err
	}
	s.schema, s.schemaLock = schema, dialect.schemaLock
	if s.cleanup, err = newCleanupStatements(dialect, config.Table); err != nil {
		return statements{}, err
	}
	if config.LockTimeout > 0 {
		s.lockTimeout, s.lockTimeoutArgs = dialect.lockTimeout(config.LockTimeout)
	}
	return s, nil
}

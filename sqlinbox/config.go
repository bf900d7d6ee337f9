package sqlinbox

import inbox "github.com/inboxkit/watermill-inbox"

// Config configures a store. The zero value is ready to use.
type Config struct {
	// Table is the inbox table, optionally qualified by a schema ("billing.inbox").
	// Default: "inbox". It is validated by inbox.ValidateTableName and quoted, so it keeps
	// the case it is written in.
	Table string
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = inbox.DefaultTable
	}
}

// statements is what a store sends, rendered once at construction.
type statements struct {
	claim      string
	schema     string
	schemaLock string
}

func newStatements(dialect Dialect, config Config) (statements, error) {
	config.setDefaults()
	claim, err := ClaimSQL(dialect, config.Table)
	if err != nil {
		return statements{}, err
	}
	schema, err := SchemaSQL(dialect, config.Table)
	if err != nil {
		return statements{}, err
	}
	return statements{claim: claim, schema: schema, schemaLock: dialect.schemaLock}, nil
}

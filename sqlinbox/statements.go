package sqlinbox

import (
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// statements is what a store sends, rendered once at construction.
type statements struct {
	dialect               Dialect
	table                 Table
	insert, prior, record string
	insertOrSkip          string // "" where the dialect has none
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
	}
	if config.LockTimeout > 0 {
		if dialect.LockTimeout == nil {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q has no LockTimeout: leave Config.LockTimeout 0", dialect.Name)
		}
		s.lockTimeout, s.lockTimeoutArgs = dialect.LockTimeout(config.LockTimeout)
	}
	return s, nil
}

// scanPrior reads the committed claim's record. No row means it was deleted between the
// claim and the read (retention): an error, so the message is redelivered and claimed anew.
func scanPrior(row interface{ Scan(...any) error }) (*inbox.Processed, error) {
	var prior inbox.Processed
	if err := row.Scan(&prior.Fingerprint, &prior.Produced); err != nil {
		return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", err)
	}
	return &prior, nil
}

// The statements that begin and end a transaction in a batch. A batch's results end the
// transaction on the connection; pgx's Tx is not involved.
const (
	sqlBegin    = "BEGIN"
	sqlCommit   = "COMMIT"
	sqlRollback = "ROLLBACK"
)

// errorChain returns err and every error it wraps, depth first.
func errorChain(err error) []error {
	var chain []error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		chain = append(chain, err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return chain
}

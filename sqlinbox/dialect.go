package sqlinbox

import (
	"errors"
	"fmt"
	"strings"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Dialect is the SQL one database speaks: every statement a store sends, the DDL, and how
// to read the database's errors. Statements are strings, so they can be read and tested
// without a database; the few that depend on a value are functions.
//
// The dialects this package ships are Postgres, MySQL and SQLite, each defined in a file of
// its own. Every field is exported, so a dialect for another database (or another driver's
// errors) can be written outside this package: start from the closest one (d :=
// sqlinbox.Postgres(), then change its fields; each call returns a new value). The
// zero Dialect is invalid.
//
// In the statement fields, %[1]s stands for the quoted table name (see Table.Quoted); write
// a literal % as %%. The claim statements' parameters are the consumer, the key and the
// payload fingerprint, in that order.
type Dialect struct {
	// Name names the dialect in messages ("postgres"). Required.
	Name string

	// ValidateTable accepts or rejects a table name before it is put into SQL text; its
	// error must wrap inbox.ErrInvalidTableName. The shipped dialects use
	// ValidateTableName. Required.
	ValidateTable func(table string) error
	// QuoteIdentifier quotes one part of a validated table name (a schema or a table), so
	// that reserved words work and case is kept as written. Required.
	QuoteIdentifier func(identifier string) string

	// Schema returns the statements that create the inbox table and its processed_at index,
	// each only if it does not exist (the columns are listed in the inbox package). Required.
	Schema func(table Table) []string
	// TableCheck reads the inbox table's shape from the catalog, so that a store refuses a
	// table that cannot guard against duplicates (ErrTableMismatch) before its first claim.
	// Required.
	TableCheck *TableCheck
	// SchemaLock, if set, runs first in InitializeSchema's transaction to serialise
	// instances that create the schema at once.
	SchemaLock string

	// Insert inserts the claim and fails on a duplicate key with an error that
	// IsDuplicateKey recognises. Required. Unless InsertOrSkip is set, the claim is Insert,
	// and the transaction must stay usable after the duplicate-key error (true of InnoDB and
	// SQLite, not of PostgreSQL), because Prior runs in it next.
	Insert string
	// InsertOrSkip, if set, is the claim: it inserts the claim, skipping only a conflict on
	// the primary key, and returns one row for a new claim and none for a duplicate, without
	// failing the transaction. Prior then reads the committed claim.
	InsertOrSkip string
	// Prior reads (payload_hash, produced) of the committed claim of (consumer, key).
	// Required.
	Prior string
	// Record stores the produced messages with the claim; its parameters are the produced
	// bytes, the consumer and the key. Required.
	Record string
	// IsDuplicateKey reports whether err, returned by Insert on table, is a violation of the
	// inbox table's primary key, and not of any other constraint. A store passes the table
	// with the primary key's name its table check read from the catalog (Table.PrimaryKey),
	// so that a key of any name is recognised. Required.
	IsDuplicateKey func(err error, table Table) bool

	// LockTimeout returns the statement, run first in the transaction, that bounds the
	// transaction's lock waits by timeout (at least 1ms); see Config.LockTimeout. Required
	// when a store is given a LockTimeout.
	LockTimeout func(timeout time.Duration) (query string, args []any)

	// Cleanup deletes one batch of the oldest rows older than a retention, of every
	// consumer; its parameters are CleanupAge's value and the batch size. Expired counts the
	// rows Cleanup would delete; its parameter is CleanupAge's value. Required for Cleanup
	// and CountExpired.
	Cleanup, Expired string
	// CleanupAge returns the retention as the parameter Cleanup and Expired take, for the
	// database's clock to compute the cutoff (the clock that set processed_at).
	CleanupAge func(olderThan time.Duration) any
	// CleanupTxLock, if set, tries, without waiting, to take the lock that lets one cleanup
	// of a table run at a time, and returns 1 if it did (also when its own transaction
	// already holds it). It is a transaction lock, which ends with the transaction that took
	// it: a cleanup takes it in a transaction of its own that stays open for the pass, runs
	// it again before each batch to check that the transaction still holds it, runs the
	// batches on other connections, and rolls the lock's transaction back at the end. Nothing
	// outlives the pass: not a killed cleaner, a lost connection, nor a pooler that runs each
	// transaction on another server connection. Its parameter is CleanupLockKey's value.
	CleanupTxLock string
	// CleanupLock tries, without waiting, to take the lock that lets one cleanup of a table
	// run at a time and returns 1 if it did; CleanupUnlock releases it and returns 1. Both
	// are session locks, held by the connection that took them, on which the pass runs its
	// batches; their parameter is CleanupLockKey's value. For a database without transaction
	// locks; CleanupTxLock takes precedence. Both empty: cleanups take no lock.
	CleanupLock, CleanupUnlock string
	// CleanupLockKey returns the parameter of CleanupTxLock, CleanupLock and CleanupUnlock.
	CleanupLockKey func(table Table) any

	// MultiStatement, if set, lets NewMultiStatement make a store on this database that
	// sends a message as multi-statement requests: several statements joined by "; ", sent
	// as one request.
	MultiStatement *MultiStatementSQL

	// tableSize returns the ways to measure the bytes the table and its indexes take, for
	// SQLStore.TableSize (the CLI's stats), which tries them in order. Nil, as in a dialect
	// written outside this package: not measurable.
	tableSize func(table Table) []sizeQuery
}

// MultiStatementSQL says that a database runs a multi-statement request (several statements
// joined by "; " and sent as one request: BEGIN, the lock timeout if set, the claim (Insert),
// the queued statements, the record of produced messages, COMMIT) in order, stops at the
// first statement that fails and leaves the transaction open for the store's ROLLBACK.
//
// The database's error does not say which statement failed: a duplicate-key error is a
// duplicate only if Prior, after the ROLLBACK, finds the committed claim. If it was a queued
// statement that failed, the claim was new when it inserted; a claim that Prior finds was
// committed since by a copy of the message, so acking it as a duplicate is right.
type MultiStatementSQL struct {
	// Probe is a multi-statement request of two statements with one parameter each, sent
	// with (1, 1) after a request failed with another error: if it fails too, the driver
	// does not run such requests, and the error says which settings it needs.
	Probe string
	// Refuse, if set, is a query a store sends once, before its first multi-statement
	// request, to learn whether the server breaks the promise above: rows of a name and a
	// value, and a value ON says it does. The store then sends no such request: every message
	// fails with an error wrapping ErrMultiStatementRefused. No row, or no ON: the requests
	// are sent. MySQL's asks for wsrep_on, ON on a node of a Galera or Percona XtraDB
	// Cluster.
	Refuse string
}

// Table is a validated table name in the forms a dialect's SQL needs.
type Table struct {
	// Name is the table name without its schema; Schema is the schema, "" if none was given.
	Name, Schema string
	// Quoted is the full name, each part quoted by the dialect ("billing"."inbox").
	Quoted string
	// PrimaryKey is the name of the table's primary key as the store's table check read it
	// from the catalog ("inbox_pkey", "pk_billing_inbox"), for IsDuplicateKey; "" in a Table
	// from ParseTable, and before the check passed.
	PrimaryKey string
}

// sizeQuery is one way to measure a table's size: SQL, with %[1]s for the quoted table,
// returns one number of bytes (NULL: this way does not apply) when run with Args. Note says
// what was measured.
type sizeQuery struct {
	SQL  string
	Args []any
	Note string
}

// String returns the dialect's name.
func (d Dialect) String() string { return d.Name }

func (d Dialect) validate() error {
	if d.Name == "" {
		return errors.New("sqlinbox: no dialect: use sqlinbox.Postgres(), sqlinbox.MySQL() or sqlinbox.SQLite()")
	}
	for _, f := range []struct {
		missing bool
		field   string
	}{
		{d.ValidateTable == nil, "ValidateTable"},
		{d.QuoteIdentifier == nil, "QuoteIdentifier"},
		{d.Schema == nil, "Schema"},
		{d.Insert == "", "Insert"},
		{d.Prior == "", "Prior"},
		{d.Record == "", "Record"},
		{d.IsDuplicateKey == nil, "IsDuplicateKey"},
		{d.TableCheck == nil || d.TableCheck.Describe == nil, "TableCheck.Describe"},
		{d.MultiStatement != nil && d.MultiStatement.Probe == "", "MultiStatement.Probe"},
	} {
		if f.missing {
			return fmt.Errorf("sqlinbox: dialect %q has no %s", d.Name, f.field)
		}
	}
	return nil
}

// ParseTable validates table with the dialect's ValidateTable and returns it in the forms
// the dialect's SQL needs.
func (d Dialect) ParseTable(table string) (Table, error) {
	if err := d.validate(); err != nil {
		return Table{}, err
	}
	if err := d.ValidateTable(table); err != nil {
		return Table{}, err
	}
	t := Table{Name: table}
	quoted := ""
	if schema, name, ok := strings.Cut(table, "."); ok {
		t.Schema, t.Name = schema, name
		quoted = d.QuoteIdentifier(schema) + "."
	}
	t.Quoted = quoted + d.QuoteIdentifier(t.Name)
	return t, nil
}

// QuoteTable validates table and returns it quoted for the dialect, ready to put into SQL.
func (d Dialect) QuoteTable(table string) (string, error) {
	t, err := d.ParseTable(table)
	return t.Quoted, err
}

// SchemaSQL returns the script that creates the inbox table and its index in dialect if they
// do not exist, each statement ended by ";", for teams that run their own migrations.
func SchemaSQL(dialect Dialect, table string) (string, error) {
	t, err := dialect.ParseTable(table)
	if err != nil {
		return "", err
	}
	return strings.Join(dialect.Schema(t), ";\n") + ";\n", nil
}

// maxIdentifierLength is PostgreSQL's limit (MySQL allows 64, SQLite more).
const maxIdentifierLength = 63

// ValidateTableName accepts a table name made of ASCII letters, digits and underscores, not
// starting with a digit, at most 63 bytes, optionally qualified by a schema of the same form
// ("inbox", "billing.inbox"). Anything else returns an error wrapping
// inbox.ErrInvalidTableName: the name is the one thing the inbox puts into SQL text, so it
// must not be able to carry SQL.
func ValidateTableName(table string) error {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w %q: at most one dot, between schema and table", inbox.ErrInvalidTableName, table)
	}
	for _, part := range parts {
		if !isIdentifier(part) {
			return fmt.Errorf("%w %q: use 1 to %d letters, digits or underscores, not starting with a digit",
				inbox.ErrInvalidTableName, table, maxIdentifierLength)
		}
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" || len(s) > maxIdentifierLength || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// indexName is the name of the processed_at index of a table called name, cut to
// PostgreSQL's identifier limit.
func indexName(name string) string {
	index := name + "_processed_at"
	if len(index) > maxIdentifierLength {
		index = index[:maxIdentifierLength]
	}
	return index
}

// render puts the quoted table into statement; a statement without verbs stays as it is.
func render(statement string, table Table) string {
	if !strings.Contains(statement, "%") {
		return statement
	}
	return fmt.Sprintf(statement, table.Quoted)
}

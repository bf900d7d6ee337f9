package sqlinbox

import (
	"fmt"
	"strings"
	"time"
)

// Dialect is the SQL one database speaks: every statement a store sends, the inbox table's
// DDL, the catalog query by which a store checks the table, and how to read the database's
// errors. Its methods return SQL text, so a dialect is read and tested without a database.
//
// [Postgres], [MySQL] and [SQLite] are the dialects this package ships, each a struct type
// defined in a file of its own, whose zero value is ready to use. [Dialect] is also the
// extension point for another database, or another driver's errors, and as an extension
// point it is not stable: methods may be added, or their contract refined, in a minor
// release. A Dialect of your own therefore embeds a shipped one by value, and overrides the
// methods that differ; an unexported method makes embedding the only way to implement the
// interface, so that such a dialect keeps compiling when a method is added, and gets the
// embedded dialect's SQL for it and every check the store asks the embedded one for:
//
//	// YugabyteDB speaks PostgreSQL's SQL; only its name differs.
//	type yugabyte struct{ sqlinbox.Postgres }
//
//	func (yugabyte) Name() string { return "yugabyte" }
//
//	store, err := sqlinbox.NewDB(db, yugabyte{}, sqlinbox.Config{})
//
// Run the conformance suite of package inboxtest on a store built with it, on the real
// database.
//
// The table's column names are fixed (consumer, message_id, processed_at, payload_hash,
// produced; see package inbox's table doc): the table check, the command-line tool and the
// conformance suite name them, so a dialect's statements and DescribeTable use them as
// they are.
//
// In the statements, the parameters are in the driver's placeholder style ($1 or ?), and
// the inbox's own values among them (the consumer, the key, the fingerprint and the produced
// record, always a string, a []byte or nil) are passed as Param returns them.
type Dialect interface {
	// Name names the dialect in messages, and in the watermill-inbox command's -dialect flag
	// ("postgres").
	Name() string

	// ParseTable validates a table name before anything puts it into SQL text, and returns it
	// in the forms the dialect's statements need. Its error wraps [ErrInvalidTableName]. The
	// shipped dialects accept what [ValidateTableName] accepts ([SQLite]: no schema but main).
	ParseTable(name string) (Table, error)

	// CreateTable returns the statements that create table t and its processed_at index,
	// each only if it does not exist, with the columns, primary key and types that the table
	// check (DescribeTable) accepts. InitializeSchema runs them in one transaction, after
	// SchemaLock; [SchemaSQL] and [MigrationFiles] write them out.
	CreateTable(t Table) []string
	// SchemaLock returns a statement that InitializeSchema runs first in its transaction, so
	// that instances that create the table at once wait for each other; "" for none.
	SchemaLock() string

	// DescribeTable returns the catalog query, sent as it is with args, that describes table
	// t for the table check: one row per column, in the table's order, holding
	//
	//	name text, type text (as the catalog writes it, with a collation that is not the
	//	type's default), position in the primary key (from 1; 0 if not in it), then the
	//	integers 0 or 1 for: exact (a string or binary type whose values compare, and are
	//	unique, byte for byte: no case folding, no trailing-space padding, no prefix index),
	//	binary (holds any bytes as they are), temporal (holds the time of the claim as
	//	DeleteExpired compares it), nullable, has a default (or is generated), and last the
	//	name of the table's primary key ("" if none), the same on every row.
	//
	// No row means the table does not exist.
	DescribeTable(t Table) (query string, args []any)
	// ColumnTypes names, for the table check's messages, the types the dialect accepts for
	// the key columns, for payload_hash and produced, and for processed_at.
	ColumnTypes() (key, binary, temporal string)
	// RetentionIndex returns a catalog query, sent as it is with args, that returns one row:
	// the number of table t's indexes whose first column is processed_at, the index by which
	// DeleteExpired finds the oldest claims without reading the whole table. The table check
	// does not ask for it (a table without it guards all the same); the command-line tool's
	// migrate, check and stats do.
	RetentionIndex(t Table) (query string, args []any)
	// UpgradeTable returns the migration that brings a table t made by an earlier release's
	// CreateTable to this release's shape: a name for its files ("unpublished"), the
	// statements that upgrade the table and those that undo the upgrade. Each statement
	// changes nothing on a table that has the shape it leads to already, so the upgrade can
	// be applied to a table of any release, also one CreateTable made. name "": the table
	// has not changed. [UpgradeFiles] writes its files.
	UpgradeTable(t Table) (name string, up, down []string)

	// InsertClaim inserts a claim (parameters: consumer, key, fingerprint) and fails on a
	// duplicate with an error that IsDuplicateKey recognises. Write-behind mode claims with
	// it on every dialect, and so does the claim-first mode where InsertClaimOrSkip is "";
	// there the transaction must stay usable after the duplicate-key error (InnoDB and
	// [SQLite] keep it), because the store reads the committed claim next.
	InsertClaim(t Table) string
	// InsertClaimOrSkip, if not "", is the claim-first mode's claim: it inserts the claim,
	// skipping only a conflict on the primary key, and returns one row for a new claim and
	// none for a duplicate, without failing the transaction (PostgreSQL's ON CONFLICT DO
	// NOTHING RETURNING).
	InsertClaimOrSkip(t Table) string
	// SelectClaim reads (payload_hash, produced) of the committed claim of (consumer, key).
	SelectClaim(t Table) string
	// UpdateProduced stores the produced record with the claim; its parameters are the
	// record, the consumer and the key.
	UpdateProduced(t Table) string
	// Param returns the parameter the dialect's statements take for one of the inbox's own
	// values (a string, a []byte, or nil). PostgreSQL and [SQLite] take the value itself.
	Param(value any) any
	// IsDuplicateKey reports whether err, returned by InsertClaim on t, is a violation of
	// the inbox table's primary key and of no other constraint. The store passes t with the
	// primary key's name that its table check read ([Table.PrimaryKey]), so that a key of any
	// name is recognised.
	IsDuplicateKey(err error, t Table) bool
	// IsTransient reports whether err holds an error this database's server raises for a
	// failure of the database rather than of the message, by its code: a deadlock or
	// serialization failure, a lock timeout, a server that is shutting down, starting up,
	// read-only or not ready, too many connections. A redelivery later gets past it, and no
	// message's content causes it. It must not report a client's errors (a connection
	// refused, a timeout, an address that does not parse): the same types come from the
	// handler's calls to other services, and the store tells its own session's failures by
	// the session (see [Store.IsTransient]).
	IsTransient(err error) bool

	// Begin is the statement that begins a transaction, for a store that sends it in a batch
	// or a request of its own ("BEGIN", "START TRANSACTION").
	Begin() string
	// LockTimeout returns the statement, run first in the inbox transaction, that bounds its
	// lock waits by timeout (at least 1ms; see [Config.LockTimeout]); "" if the dialect has
	// none, and then a store refuses a LockTimeout.
	LockTimeout(timeout time.Duration) (query string, args []any)

	// DeleteExpired deletes one batch of the oldest claims older than a retention, of every
	// consumer; its parameters are Age's value and the batch size. CountExpired counts the
	// claims DeleteExpired would delete; its parameter is Age's value. Both compare
	// processed_at with the clock that set it.
	DeleteExpired(t Table) string
	CountExpired(t Table) string
	// Age returns the retention as the parameter DeleteExpired and CountExpired take.
	Age(olderThan time.Duration) any
	// CleanupLock returns the lock by which one cleanup of t runs at a time: take tries,
	// without waiting, to take it and returns 1 if it did, with key as its parameter. With
	// release "", take is a transaction lock, held until the transaction that took it ends
	// (taking it again in that transaction returns 1): a cleanup takes it in a transaction of
	// its own and runs its batches elsewhere, so nothing outlives the pass. Otherwise it is a
	// session lock, which release releases (returning 1), and the pass runs on the connection
	// that took it. take "": cleanups take no lock.
	CleanupLock(t Table) (take, release string, key any)
	// TableSize returns ways to measure the bytes table t and its indexes take, tried in
	// order until one returns a number.
	TableSize(t Table) []SizeQuery

	// MultiStatement returns what lets [NewMultiStatement] send a message as multi-statement
	// requests on this database; nil if it cannot.
	MultiStatement() *MultiStatementSQL

	// RequestLimit returns a query of one integer, the most bytes the server accepts in one
	// request ([MySQL]: max_allowed_packet), asked only after a large request failed, so that
	// the error can say why and wrap [inbox.ErrRecordTooLarge]; "" if the database has no such
	// limit near a record the middleware accepts.
	RequestLimit() string

	// Relay returns the SQL of the unpublished mark on t (see [RelaySQL]); nil if the dialect
	// keeps none, and its stores then work as on a table without the column.
	Relay(t Table) *RelaySQL

	// dialect is unexported so that every [Dialect] embeds a shipped one.
	dialect()
}

// MultiStatementSQL says that a database runs a multi-statement request (statements separated
// by ";" and sent as one request: Begin, the lock timeout if set, the claim, the queued
// statements, the record of produced messages, COMMIT) in order, stops at the first statement
// that fails and leaves the transaction open for the store's ROLLBACK.
//
// The database's error does not say which statement failed: a duplicate-key error is a
// duplicate only if SelectClaim, after the ROLLBACK, finds the committed claim. If it was a
// queued statement that failed, the claim was new when it inserted; a claim that SelectClaim
// finds was committed since by a copy of the message, so acking it as a duplicate is right.
type MultiStatementSQL struct {
	// Probe is a multi-statement request of two statements with one parameter each, sent with
	// (1, 1) after a request failed with another error: if it fails too, the driver does not
	// run such requests, and the error says which settings it needs.
	Probe string
	// Refuse, if set, is a query a store sends once, before its first multi-statement
	// request, to learn whether the server breaks the promise above: rows of a name and a
	// value, and a value ON says it does. The store then sends no such request: every message
	// fails with an error wrapping [ErrMultiStatementRefused]. No row, or no ON: the requests are
	// sent. [MySQL]'s asks for wsrep_on, ON on a node of a Galera or Percona XtraDB Cluster.
	Refuse string
}

// RelaySQL is the SQL of the inbox table's column unpublished (see [Dialect.Relay]): set in
// the claim's commit when its record holds messages for publishing, cleared once they have
// been published. It lets a [RelayRunner] publish the records whose publish failed or never
// ran, a duplicate or an HTTP replay skip publishing again what has left, and retention keep
// what has not. A store uses it only on a table that has the column (its table check reads
// the catalog); a table made before the column works as before, without a relay.
type RelaySQL struct {
	// Record is [Dialect.UpdateProduced] that also sets unpublished, for a record that holds
	// messages; the same parameters.
	Record string
	// InsertUnpublished, if set, is [Dialect.InsertClaim] that also stores the record and sets
	// unpublished (parameters: consumer, key, fingerprint, produced), and InsertUnpublishedOrSkip
	// ("" if none) the same as [Dialect.InsertClaimOrSkip]: write-behind mode claims with them
	// when the record holds messages, so that the row is written once, not inserted and then
	// updated in the same transaction. Leave them "" where a failure of the record (a request
	// over the server's limit) must be told from the claim's: the store then sends Record.
	InsertUnpublished, InsertUnpublishedOrSkip string
	// SelectClaim is [Dialect.SelectClaim] with a third column of bytes: NULL while the
	// record is unpublished, not NULL once it is published.
	SelectClaim string
	// DeleteExpired and CountExpired are the dialect's, with unpublished records left out.
	DeleteExpired, CountExpired string
	// Mark returns the statement that clears unpublished on the claims of consumers[i] and
	// keys[i], and its parameters.
	Mark func(consumers, keys []string) (query string, args []any)
	// Lock, if set, runs first in a relay pass's transaction, so that what Take reads stays
	// the pass's until it commits on a database without row locks ([SQLite]: it takes the write
	// lock).
	Lock string
	// Take returns up to the second parameter of the unpublished records claimed more than
	// the first ago (in [Dialect.Age]'s unit), oldest first, as rows of consumer, message_id
	// and produced, and locks them until the pass's transaction ends, skipping rows another
	// transaction holds, so that two passes at once never take one record.
	Take string
	// Backlog returns one row: the number of unpublished records and the age of the oldest
	// in microseconds (0 when there is none).
	Backlog string
	// AddColumn adds the column and its index to a table made without them, for the table
	// check's message and the upgrade migration.
	AddColumn []string
}

// Table is a validated table name in the forms a dialect's SQL needs.
type Table struct {
	// Name is the table name without its schema; Schema is the schema, "" if none was given.
	Name, Schema string
	// Quoted is the full name, each part quoted by the dialect ("billing"."inbox").
	Quoted string
	// PrimaryKey is the name of the table's primary key as the store's table check read it
	// from the catalog ("inbox_pkey", "pk_billing_inbox"), for IsDuplicateKey; "" in a [Table]
	// from ParseTable, and before the check passed.
	PrimaryKey string
}

// SizeQuery is one way to measure a table's size (see [Dialect.TableSize]): SQL, run with
// Args, returns one number of bytes, or NULL where this way does not apply. Note says what
// it measures, for the command-line tool's stats.
type SizeQuery struct {
	SQL  string
	Args []any
	Note string
}

// SchemaSQL returns the script that creates the inbox table and its index in dialect if they
// do not exist, each statement ended by ";", for teams that run their own migrations.
func SchemaSQL(dialect Dialect, table string) (string, error) {
	t, err := parseTable(dialect, table)
	if err != nil {
		return "", err
	}
	return strings.Join(dialect.CreateTable(t), ";\n") + ";\n", nil
}

// parseTable is ParseTable, after refusing a dialect that cannot be used (see checkDialect).
func parseTable(dialect Dialect, table string) (Table, error) {
	if err := checkDialect(dialect); err != nil {
		return Table{}, err
	}
	return dialect.ParseTable(table)
}

// render puts the quoted table into statement, where %[1]s stands for it (a literal % is
// written %%); a statement without verbs stays as it is.
func render(statement string, table Table) string {
	if !strings.Contains(statement, "%") {
		return statement
	}
	return fmt.Sprintf(statement, table.Quoted)
}

// placeholderPairs writes n pairs of placeholders, "(p1, p2), (p3, p4)", numbered from 1 by
// placeholder.
func placeholderPairs(n int, placeholder func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + placeholder(2*i+1) + ", " + placeholder(2*i+2) + ")")
	}
	return b.String()
}

// pairs interleaves consumers and keys as the parameters of placeholderPairs, each through
// param.
func pairs(param func(any) any, consumers, keys []string) []any {
	args := make([]any, 0, 2*len(keys))
	for i := range keys {
		args = append(args, param(consumers[i]), param(keys[i]))
	}
	return args
}

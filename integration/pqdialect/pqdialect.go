// Package pqdialect is a sqlinbox.Dialect written outside package sqlinbox, as a team writes
// one for a database or a driver the library does not ship: PostgreSQL through
// github.com/lib/pq, whose errors are *pq.Error rather than pgx's *pgconn.PgError. It writes
// out every exported method, with SQL of its own, and embeds sqlinbox.Postgres only for the
// interface's unexported method (TestEveryMethodIsWrittenHere checks that nothing else is
// promoted from it), so that its tests passing shows a dialect needs nothing the library
// keeps to itself. (A team's own dialect embeds sqlinbox.Postgres too, and overrides only
// what differs.)
//
// Its tests run the store conformance suite, the table check, retention, the command-line
// tool's schema, check and stats, and the handler kit on it, against the real PostgreSQL.
package pqdialect

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Dialect is PostgreSQL through lib/pq.
type Dialect struct{ sqlinbox.Postgres }

// New returns the dialect.
func New() sqlinbox.Dialect { return Dialect{} }

// Name names it in messages and in the command-line tool's -dialect flag.
func (Dialect) Name() string { return "pq" }

// ParseTable accepts ValidateTableName's names and quotes each part.
func (Dialect) ParseTable(name string) (sqlinbox.Table, error) {
	if err := sqlinbox.ValidateTableName(name); err != nil {
		return sqlinbox.Table{}, err
	}
	t := sqlinbox.Table{Name: name}
	if schema, table, ok := strings.Cut(name, "."); ok {
		t.Schema, t.Name = schema, table
		t.Quoted = pq.QuoteIdentifier(schema) + "."
	}
	t.Quoted += pq.QuoteIdentifier(t.Name)
	return t, nil
}

// CreateTable creates the table with text keys in collation "C", and its index.
func (Dialect) CreateTable(t sqlinbox.Table) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.Quoted + ` (
	consumer     text COLLATE "C" NOT NULL,
	message_id   text COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	payload_hash bytea,
	produced     bytea,
	CONSTRAINT ` + pq.QuoteIdentifier("pk_"+t.Name) + ` PRIMARY KEY (consumer, message_id)
)`,
		`CREATE INDEX IF NOT EXISTS ` + pq.QuoteIdentifier(t.Name+"_at") + ` ON ` + t.Quoted + ` (processed_at)`,
	}
}

// SchemaLock serialises instances that create the table at once.
func (Dialect) SchemaLock() string { return `SELECT pg_advisory_xact_lock(4242)` }

// DescribeTable is the catalog query, written another way than the library's.
func (Dialect) DescribeTable(t sqlinbox.Table) (string, []any) {
	return `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) || COALESCE(' COLLATE ' || quote_ident(co.collname), ''),
	COALESCE(array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) + 1, 0)::int,
	(a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'bytea'::regtype) AND COALESCE(co.collisdeterministic, true))::int,
	(a.atttypid = 'bytea'::regtype)::int,
	(a.atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype))::int,
	(NOT a.attnotnull)::int, (a.atthasdef OR a.attgenerated <> '' OR a.attidentity <> '')::int,
	COALESCE((SELECT conname::text FROM pg_constraint WHERE conrelid = a.attrelid AND contype = 'p'), '')
FROM pg_attribute a
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 'default'::regcollation
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, []any{t.Quoted}
}

// ColumnTypes names the types it wants, for the table check's messages.
func (Dialect) ColumnTypes() (key, binary, temporal string) {
	return `text COLLATE "C"`, "bytea", "timestamptz"
}

// RetentionIndex counts the table's indexes that lead with processed_at.
func (Dialect) RetentionIndex(t sqlinbox.Table) (string, []any) {
	return `SELECT count(*) FROM pg_indexes WHERE schemaname = COALESCE(NULLIF($1, ''), current_schema())
	AND tablename = $2 AND indexdef LIKE '%(processed_at%'`, []any{t.Schema, t.Name}
}

// UpgradeTable: the table has not changed since the first release.
func (Dialect) UpgradeTable(sqlinbox.Table) (name string, up, down []string) { return "", nil, nil }

// InsertClaim inserts the claim; a duplicate fails on the primary key.
func (Dialect) InsertClaim(t sqlinbox.Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)`
}

// InsertClaimOrSkip skips a conflict on the primary key and returns a row only for a new claim.
func (Dialect) InsertClaimOrSkip(t sqlinbox.Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)
ON CONFLICT ON CONSTRAINT ` + pq.QuoteIdentifier("pk_"+t.Name) + ` DO NOTHING RETURNING 1`
}

// SelectClaim reads the committed claim's record.
func (Dialect) SelectClaim(t sqlinbox.Table) string {
	return `SELECT payload_hash, produced FROM ` + t.Quoted + ` WHERE consumer = $1 AND message_id = $2`
}

// UpdateProduced stores the record of produced messages.
func (Dialect) UpdateProduced(t sqlinbox.Table) string {
	return `UPDATE ` + t.Quoted + ` SET produced = $1 WHERE consumer = $2 AND message_id = $3`
}

// Param passes the value as it is: lib/pq sends parameters apart from the text.
func (Dialect) Param(value any) any { return value }

// IsDuplicateKey recognises lib/pq's unique violation of the table's primary key.
func (Dialect) IsDuplicateKey(err error, t sqlinbox.Table) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "23505" && pqErr.Table == t.Name && pqErr.Constraint == t.PrimaryKey
}

// IsTransient recognises deadlocks, serialization failures, lock timeouts, a read-only
// server and a server shutting down, as lib/pq reports them.
func (Dialect) IsTransient(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	switch pqErr.Code.Class() {
	case "08", "40", "57", "53":
		return true
	}
	return pqErr.Code == "55P03" || pqErr.Code == "25006"
}

// Begin begins a transaction in a request of the store's own.
func (Dialect) Begin() string { return "START TRANSACTION" }

// LockTimeout bounds the transaction's lock waits.
func (Dialect) LockTimeout(timeout time.Duration) (string, []any) {
	return `SELECT set_config('lock_timeout', $1, true)`, []any{fmt.Sprintf("%dms", max(timeout.Milliseconds(), 1))}
}

// DeleteExpired deletes one batch of the oldest claims older than $1 seconds.
func (Dialect) DeleteExpired(t sqlinbox.Table) string {
	return `DELETE FROM ` + t.Quoted + ` WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM ` + t.Quoted +
		` WHERE processed_at < now() - $1 * interval '1 second' ORDER BY processed_at LIMIT $2)`
}

// CountExpired counts the claims older than $1 seconds.
func (Dialect) CountExpired(t sqlinbox.Table) string {
	return `SELECT count(*) FROM ` + t.Quoted + ` WHERE processed_at < now() - $1 * interval '1 second'`
}

// Age is the retention in seconds.
func (Dialect) Age(olderThan time.Duration) any { return olderThan.Seconds() }

// CleanupLock is a transaction-level advisory lock keyed by the table's OID.
func (Dialect) CleanupLock(t sqlinbox.Table) (take, release string, key any) {
	return `SELECT pg_try_advisory_xact_lock(4243, $1::text::regclass::oid::int)::int`, "", t.Quoted
}

// TableSize measures the table with its indexes.
func (Dialect) TableSize(t sqlinbox.Table) []sqlinbox.SizeQuery {
	return []sqlinbox.SizeQuery{{SQL: `SELECT pg_total_relation_size($1::text::regclass)`, Args: []any{t.Quoted}, Note: "pg_total_relation_size"}}
}

// MultiStatement: none.
func (Dialect) MultiStatement() *sqlinbox.MultiStatementSQL { return nil }

// RequestLimit: PostgreSQL has no request limit near a record the middleware accepts.
func (Dialect) RequestLimit() string { return "" }

// Relay: this dialect's table has no column unpublished, so its stores keep no marks and run
// no relay; a duplicate publishes its record again.
func (Dialect) Relay(sqlinbox.Table) *sqlinbox.RelaySQL { return nil }

package sqlinbox

import (
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Postgres is the dialect of PostgreSQL, through pgx ([NewPgx]) or any database/sql
// driver that returns [*pgconn.PgError], such as pgx's stdlib ([NewDB]). The claim is INSERT ...
// ON CONFLICT (consumer, message_id) DO NOTHING RETURNING true; a duplicate then reads the
// committed claim.
type Postgres struct{}

func (Postgres) dialect() {}

// postgres marks Postgres and the dialects that embed it, which the pgx stores accept.
func (Postgres) postgres() {}

// RequestLimit: no limit near a record the middleware accepts (a bytea holds 1 GB).
func (Postgres) RequestLimit() string { return "" }

func (Postgres) Name() string { return "postgres" }

func (Postgres) ParseTable(name string) (Table, error) { return parseQualified(name, doubleQuote) }

// doubleQuote quotes an identifier the standard way; a validated identifier holds no quote.
func doubleQuote(identifier string) string { return `"` + identifier + `"` }

// CreateTable: the key columns compare bytes exactly, by collation "C" (also the fastest to
// index); the index lets retention find old rows without reading the whole table. A
// qualified table's schema is created first if it does not exist, so that a migration runs
// on a new database: CREATE SCHEMA IF NOT EXISTS would need the CREATE privilege on the
// database even when the schema exists, which a team's migration user may lack, so the
// block creates it only when it is missing (and lets a schema created meanwhile be).
func (Postgres) CreateTable(t Table) []string {
	var schema []string
	if t.Schema != "" {
		schema = []string{`DO $$ BEGIN
	IF to_regnamespace('` + doubleQuote(t.Schema) + `') IS NULL THEN
		CREATE SCHEMA ` + doubleQuote(t.Schema) + `;
	END IF;
EXCEPTION WHEN duplicate_schema THEN NULL;
END $$`}
	}
	return append(schema,
		`CREATE TABLE IF NOT EXISTS `+t.Quoted+` (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	unpublished  boolean NOT NULL DEFAULT false,
	PRIMARY KEY (consumer, message_id)
)`,
		`CREATE INDEX IF NOT EXISTS `+doubleQuote(indexName(t.Name))+` ON `+t.Quoted+` (processed_at)`,
		postgresUnpublishedIndex(t),
	)
}

// postgresUnpublishedIndex is partial: it holds the unpublished records alone, which are few,
// so the relay finds them without reading the claims and a mark removes its entry. It is made
// only on a table that has the column, so that CreateTable still runs on a table made before
// it (which the upgrade brings up to date). It is one line: no ";" of it ends a line, where a
// script's statements are split.
func postgresUnpublishedIndex(t Table) string {
	return `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('` + t.Quoted + `') AND attname = 'unpublished' AND NOT attisdropped) THEN ` +
		`CREATE INDEX IF NOT EXISTS ` + doubleQuote(unpublishedIndexName(t.Name)) + ` ON ` + t.Quoted + ` (processed_at) WHERE unpublished; END IF; END $$`
}

// Relay: FOR UPDATE SKIP LOCKED lets two relays' passes take disjoint records; a mark is one
// UPDATE joined to the arrays of the keys.
func (Postgres) Relay(t Table) *RelaySQL {
	return &RelaySQL{
		Record:            `UPDATE ` + t.Quoted + ` SET produced = $1, unpublished = true WHERE consumer = $2 AND message_id = $3`,
		InsertUnpublished: `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash, produced, unpublished) VALUES ($1, $2, $3, $4, true)`,
		InsertUnpublishedOrSkip: `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash, produced, unpublished) VALUES ($1, $2, $3, $4, true)
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING true`,
		SelectClaim:   `SELECT payload_hash, produced, CASE WHEN unpublished THEN NULL ELSE '\x01'::bytea END FROM ` + t.Quoted + ` WHERE consumer = $1 AND message_id = $2`,
		DeleteExpired: render(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond' AND NOT unpublished ORDER BY processed_at LIMIT $2))`, t),
		CountExpired:  `SELECT count(*) FROM ` + t.Quoted + ` WHERE processed_at < now() - $1::bigint * interval '1 microsecond' AND NOT unpublished`,
		// One text whatever the number of claims, so that it is prepared once per connection:
		// a list of n pairs would be a statement of its own, planned anew, for every n.
		Mark: func(consumers, keys []string) (string, []any) {
			return `UPDATE ` + t.Quoted + ` AS t SET unpublished = false FROM unnest($1::text[], $2::text[]) AS m(consumer, message_id) ` +
				`WHERE t.consumer = m.consumer AND t.message_id = m.message_id AND t.unpublished`, []any{consumers, keys}
		},
		Take:    `SELECT consumer, message_id, produced FROM ` + t.Quoted + ` WHERE unpublished AND processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
		Backlog: `SELECT count(*), COALESCE((extract(epoch FROM now() - min(processed_at)) * 1000000)::bigint, 0) FROM ` + t.Quoted + ` WHERE unpublished`,
		AddColumn: []string{
			`ALTER TABLE ` + t.Quoted + ` ADD COLUMN IF NOT EXISTS unpublished boolean NOT NULL DEFAULT false`,
			postgresUnpublishedIndex(t),
		},
	}
}

// SchemaLock: CREATE TABLE IF NOT EXISTS can fail when two sessions run it at once.
func (Postgres) SchemaLock() string { return `SELECT pg_advisory_xact_lock(7061261737466313)` }

func (Postgres) DescribeTable(t Table) (string, []any) { return postgresDescribe, []any{t.Quoted} }

// ColumnTypes: bytea only for the bytes, because text refuses the bytes of a fingerprint
// that are not UTF-8.
func (Postgres) ColumnTypes() (key, binary, temporal string) {
	return `varchar or text with a deterministic collation (COLLATE "C"), or bytea`, "bytea", "timestamptz"
}

// RetentionIndex counts the valid indexes of the table named by $1 (quoted, found as
// postgresDescribe finds it) that start with processed_at and hold every row: the partial
// index of the unpublished records does not serve retention.
func (Postgres) RetentionIndex(t Table) (string, []any) {
	return `SELECT count(*) FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = to_regclass($1::text) AND a.attname = 'processed_at' AND i.indisvalid AND i.indpred IS NULL`, []any{t.Quoted}
}

// UpgradeTable adds the column unpublished and its index (see [RelaySQL]); both are made only
// if missing, so the upgrade is safe on a table this release created. The down migration
// drops them.
func (p Postgres) UpgradeTable(t Table) (string, []string, []string) {
	return "unpublished", p.Relay(t).AddColumn, []string{
		`DROP INDEX IF EXISTS ` + qualifiedIndex(t, unpublishedIndexName(t.Name)),
		`ALTER TABLE ` + t.Quoted + ` DROP COLUMN IF EXISTS unpublished`,
	}
}

// qualifiedIndex names an index in t's schema, where PostgreSQL creates a table's indexes.
func qualifiedIndex(t Table, index string) string {
	if t.Schema == "" {
		return doubleQuote(index)
	}
	return doubleQuote(t.Schema) + "." + doubleQuote(index)
}

// postgresDescribe describes the table named by $1 (quoted, found on the search path as the
// store's statements find it) for the table check. Exact: text, varchar or bytea (not
// char(n), which ignores trailing spaces; not citext or a domain) with a deterministic
// collation, under which equal means the same bytes. Temporal: timestamptz, an instant; a
// timestamp without time zone holds the claiming session's local time, which DeleteExpired
// would read in the cleaning session's TimeZone.
const postgresDescribe = `SELECT a.attname::text,
	format_type(a.atttypid, a.atttypmod) ||
		CASE WHEN a.attcollation <> t.typcollation THEN ' COLLATE ' || quote_ident(c.collname) ELSE '' END,
	COALESCE((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) WHERE k.attnum = a.attnum), 0)::int,
	(t.typtype = 'b' AND t.typname IN ('text', 'varchar', 'bytea') AND (c.oid IS NULL OR c.collisdeterministic))::int,
	(t.typname = 'bytea')::int,
	(t.typname = 'timestamptz')::int,
	(NOT a.attnotnull)::int,
	(a.atthasdef OR a.attgenerated <> '' OR a.attidentity <> '')::int,
	COALESCE(con.conname::text, '')
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_collation c ON c.oid = a.attcollation
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.contype = 'p'
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

// InsertClaim aborts the transaction on a duplicate, as every failed statement does in
// PostgreSQL: write-behind mode, where the duplicate ends the transaction anyway, claims with
// it; the claim-first mode with InsertClaimOrSkip. The claim reads nothing back: duplicates
// are rare, and a claim that also read the committed claim measured slower for every first
// delivery.
func (Postgres) InsertClaim(t Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)`
}

func (Postgres) InsertClaimOrSkip(t Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING true`
}

func (Postgres) SelectClaim(t Table) string {
	return `SELECT payload_hash, produced FROM ` + t.Quoted + ` WHERE consumer = $1 AND message_id = $2`
}

func (Postgres) UpdateProduced(t Table) string {
	return `UPDATE ` + t.Quoted + ` SET produced = $1 WHERE consumer = $2 AND message_id = $3`
}

// Param: the parameters travel apart from the text (or, in pgx's simple protocol, are
// quoted by pgx for standard_conforming_strings, which it requires).
func (Postgres) Param(value any) any { return value }

// IsDuplicateKey recognises a unique violation (SQLSTATE 23505) of the inbox table's primary
// key: the constraint the error names is the key the table check read from the catalog
// ([Table.PrimaryKey]), whatever it is called ("inbox_pkey", "pk_billing_inbox", "inbox_pkey1"
// after a re-create), on the table the error names. Any other unique index of the table is
// not the key. The error is a [*pgconn.PgError], found with [errors.As], from pgx and from its
// database/sql driver.
func (Postgres) IsDuplicateKey(err error, t Table) bool {
	var pgErr *pgconn.PgError
	if t.PrimaryKey == "" || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return false
	}
	return pgErr.ConstraintName == t.PrimaryKey && pgErr.TableName == t.Name &&
		(t.Schema == "" || pgErr.SchemaName == t.Schema)
}

// IsTransient: the SQLSTATEs a server raises for a state of its own or a race between
// transactions, which a later attempt gets past and which no message's content causes. It
// reads the code alone, so it says nothing of where the error was raised: the store tells its
// own session's failures (a connection lost, refused or timed out, told by the session rather
// than by the error's type) and leaves out what the handler met elsewhere (see
// Store.IsTransient). Class 08 is not among them: a connection exception the server raises
// is a protocol violation (08P01: a statement with more placeholders than arguments, in
// QueryExecModeExec) or another server's connection (postgres_fdw, dblink), and neither is
// the inbox's database failing; and an error inside a [*pgconn.ConnectError] is a connection
// that could not be made, which on the store's own pool the store marks itself (a handler's
// to another database is the message's).
func (Postgres) IsTransient(err error) bool {
	var connectErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if errors.As(err, &connectErr) || !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"40003", // statement_completion_unknown
		"55P03", // lock_not_available: Config.LockTimeout
		"25006", // read_only_sql_transaction: a standby, or a primary demoted in a failover
		"57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up, or in recovery
		"53300": // too_many_connections
		return true
	}
	return false
}

func (Postgres) Begin() string { return "BEGIN" }

// commitCheck: the claim's row was inserted by this very transaction (its xmin, the inserting
// transaction's id, is the current one's, txid_current() without its epoch), so a transaction
// that a handler's ROLLBACK, COMMIT or COMMIT and BEGIN ended returns no row: one index lookup
// of the claim, and no mark.
func (Postgres) commitCheck(t Table) (mark, check string, returnsRow bool) {
	return "", `SELECT 1 FROM ` + t.Quoted + ` WHERE consumer = $1 AND message_id = $2 AND xmin::text::bigint = txid_current() % 4294967296`, true
}

func (Postgres) checkFailed(error) bool { return false } // the check says so by its row

// lexicon: PostgreSQL's quotes and comments (see txGuard).
func (Postgres) lexicon() sqlLexicon { return sqlLexicon{postgres: true} }

// endsTransaction names the statements that end a PostgreSQL transaction: COMMIT, END,
// ROLLBACK, ABORT, BEGIN and START TRANSACTION (which inside a transaction only warn, but are
// a handler's transaction control all the same), and PREPARE TRANSACTION, which hands the
// transaction to two-phase commit. A procedure or DO block cannot end a transaction that a
// BEGIN opened: the server refuses its COMMIT.
func (Postgres) endsTransaction(st sqlStatement) string {
	if what := endsTransactionStandard(st); what != "" {
		return what
	}
	switch {
	case st.word(0) == "abort":
		return "ABORT"
	case st.word(0) == "prepare" && st.word(1) == "transaction":
		return "PREPARE TRANSACTION"
	}
	return ""
}

// LockTimeout: set_config(..., true) is SET LOCAL with a parameter; it ends with the
// transaction, so it is safe behind a pooler in transaction mode.
func (Postgres) LockTimeout(timeout time.Duration) (string, []any) {
	return `SELECT set_config('lock_timeout', $1, true)`, []any{strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"}
}

// DeleteExpired deletes by ctid, the row's physical address: the subquery finds the batch
// through the processed_at index, the DELETE goes straight to each row.
func (Postgres) DeleteExpired(t Table) string {
	return render(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2))`, t)
}

func (Postgres) CountExpired(t Table) string {
	return `SELECT count(*) FROM ` + t.Quoted + ` WHERE processed_at < now() - $1::bigint * interval '1 microsecond'`
}

func (Postgres) Age(olderThan time.Duration) any { return olderThan.Microseconds() }

// CleanupLock is a transaction-level advisory lock keyed by the table's OID, so that "inbox"
// and "public.inbox" share one lock (regclass parses the quoted name: the lock follows the
// table, not its spelling); the first int4 ("winb") keeps it apart from other advisory locks.
// A session lock would stay on the server connection that took it when a pooler in
// transaction mode runs the unlock on another.
func (Postgres) CleanupLock(t Table) (take, release string, key any) {
	return `SELECT pg_try_advisory_xact_lock(2003398242, $1::text::regclass::oid::int)::int`, "", t.Quoted
}

func (Postgres) TableSize(t Table) []SizeQuery {
	return []SizeQuery{{SQL: `SELECT pg_total_relation_size($1::text::regclass)`, Args: []any{t.Quoted}, Note: "pg_total_relation_size"}}
}

func (Postgres) MultiStatement() *MultiStatementSQL { return nil }

package sqlinbox

import (
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Postgres returns the dialect of PostgreSQL, through pgx (NewPgx) or any database/sql
// driver that returns *pgconn.PgError, such as pgx's stdlib. The claim is INSERT ... ON
// CONFLICT (consumer, message_id) DO NOTHING RETURNING true; a duplicate then reads the
// committed claim. Each call returns a new value, which the caller may change without
// touching any other.
func Postgres() Dialect {
	return Dialect{
		Name:          "postgres",
		ValidateTable: ValidateTableName,
		QuoteIdentifier: func(identifier string) string {
			return `"` + identifier + `"`
		},
		// The key columns compare bytes exactly: collation "C" (also the fastest to index).
		Schema: func(t Table) []string {
			index := `"` + indexName(t.Name) + `"`
			return []string{
				render(`CREATE TABLE IF NOT EXISTS %s (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	PRIMARY KEY (consumer, message_id)
)`, t),
				// The index lets retention find old rows without reading the whole table.
				`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + t.Quoted + ` (processed_at)`,
			}
		},
		TableCheck: &TableCheck{
			Describe: func(t Table) (string, []any) { return postgresDescribe, []any{t.Quoted} },
			KeyType:  `varchar or text with a deterministic collation (COLLATE "C"), or bytea`,
			// bytea only: text refuses the bytes of a fingerprint that are not UTF-8.
			BytesType: "bytea",
			TimeType:  "timestamptz",
		},
		// CREATE TABLE IF NOT EXISTS can fail when two sessions run it at once.
		SchemaLock: `SELECT pg_advisory_xact_lock(7061261737466313)`,

		// A failed statement aborts a PostgreSQL transaction: the claim is InsertOrSkip, and
		// Insert serves a caller that treats the duplicate as the end of the transaction
		// (write-behind mode). The claim reads nothing back: duplicates are rare, and a claim
		// that also read the committed claim measured slower for every first delivery.
		Insert: `INSERT INTO %s (consumer, message_id, payload_hash) VALUES ($1, $2, $3)`,
		InsertOrSkip: `INSERT INTO %s (consumer, message_id, payload_hash) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING true`,
		Prior:          `SELECT payload_hash, produced FROM %s WHERE consumer = $1 AND message_id = $2`,
		Record:         `UPDATE %s SET produced = $1 WHERE consumer = $2 AND message_id = $3`,
		IsDuplicateKey: postgresDuplicateKey,

		// set_config(..., true) is SET LOCAL with a parameter: it ends with the transaction.
		LockTimeout: func(timeout time.Duration) (string, []any) {
			return `SELECT set_config('lock_timeout', $1, true)`,
				[]any{strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + "ms"}
		},

		// By ctid, the row's physical address: the subquery finds the batch through the
		// processed_at index, the DELETE goes straight to each row.
		Cleanup:    `DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2))`,
		Expired:    `SELECT count(*) FROM %[1]s WHERE processed_at < now() - $1::bigint * interval '1 microsecond'`,
		CleanupAge: func(olderThan time.Duration) any { return olderThan.Microseconds() },
		// The key is the table's OID, so "inbox" and "public.inbox" share one lock; the first
		// int4 ("winb") keeps it apart from other advisory locks. A transaction-level advisory
		// lock ends with its transaction: a session lock would stay on the server connection
		// that took it when a pooler in transaction mode runs the unlock on another.
		CleanupTxLock: `SELECT pg_try_advisory_xact_lock(2003398242, $1::text::regclass::oid::int)::int`,
		// regclass parses the quoted name, so the lock follows the table, not its spelling.
		CleanupLockKey: func(t Table) any { return t.Quoted },

		tableSize: func(t Table) []sizeQuery {
			return []sizeQuery{{
				SQL:  `SELECT pg_total_relation_size($1::text::regclass)`,
				Args: []any{t.Quoted},
				Note: "pg_total_relation_size",
			}}
		},
	}
}

// postgresDescribe describes the table named by $1 (quoted, found on the search path as the
// store's statements find it) for TableCheck. Exact: text, varchar or bytea (not char(n),
// which ignores trailing spaces; not citext or a domain) with a deterministic collation,
// under which equal means the same bytes.
const postgresDescribe = `SELECT a.attname::text,
	format_type(a.atttypid, a.atttypmod) ||
		CASE WHEN a.attcollation <> t.typcollation THEN ' COLLATE ' || quote_ident(c.collname) ELSE '' END,
	COALESCE((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) WHERE k.attnum = a.attnum), 0)::int,
	(t.typtype = 'b' AND t.typname IN ('text', 'varchar', 'bytea') AND (c.oid IS NULL OR c.collisdeterministic))::int,
	(t.typname = 'bytea')::int,
	(t.typname IN ('timestamptz', 'timestamp'))::int,
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

// postgresDuplicateKey recognises a unique violation (SQLSTATE 23505) of the inbox table's
// primary key: the constraint the error names is the key the table check read from the
// catalog (Table.PrimaryKey), whatever it is called ("inbox_pkey", "pk_billing_inbox",
// "inbox_pkey1" after a re-create), on the table the error names. Any other unique index of
// the table is not the key. The error is a *pgconn.PgError, found with errors.As, from pgx
// and from its database/sql driver.
func postgresDuplicateKey(err error, t Table) bool {
	var pgErr *pgconn.PgError
	if t.PrimaryKey == "" || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		return false
	}
	return pgErr.ConstraintName == t.PrimaryKey && pgErr.TableName == t.Name &&
		(t.Schema == "" || pgErr.SchemaName == t.Schema)
}

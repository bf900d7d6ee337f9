package sqlinbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SQLite is the dialect of SQLite 3.24 or later, through modernc.org/sqlite or
// github.com/mattn/go-sqlite3. Open the database with a busy timeout (modernc.org/sqlite:
// _pragma=busy_timeout(10000)) so concurrent writers wait for each other instead of failing
// with SQLITE_BUSY. The claim is the transaction's first statement, so it takes the write
// lock at once; a duplicate fails it with SQLITE_CONSTRAINT_PRIMARYKEY, which ends the
// statement but not the transaction.
type SQLite struct{}

func (SQLite) dialect() {}

// RequestLimit: no limit near a record the middleware accepts (SQLITE_MAX_LENGTH, 1 GB).
func (SQLite) RequestLimit() string { return "" }

func (SQLite) Name() string { return "sqlite" }

// ParseTable accepts no schema: in [SQLite] another schema is an attached database, which every
// connection of the store's pool, and of a migration tool, would have to ATTACH itself, or
// the table is not found; and main.inbox is inbox under a second name, which the team's
// migrations, its stores and the command-line tool would each have to spell one way.
func (SQLite) ParseTable(name string) (Table, error) {
	t, err := parseQualified(name, doubleQuote)
	if err != nil {
		return Table{}, err
	}
	if t.Schema != "" {
		what := t.Schema + " would be an attached database"
		if t.Schema == "main" {
			what = "main is the database itself"
		}
		return Table{}, fmt.Errorf("%w %q: SQLite has no schemas (%s); use the table's name alone", ErrInvalidTableName, name, what)
	}
	return t, nil
}

func (SQLite) CreateTable(t Table) []string {
	index := doubleQuote(indexName(t.Name))
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.Quoted + ` (
	consumer     TEXT NOT NULL,
	message_id   TEXT NOT NULL,
	processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
	payload_hash BLOB,
	produced     BLOB,
	unpublished  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + t.Quoted + ` (processed_at)`,
	}
}

// Relay: SQLite has no row locks; Lock takes the database's write lock first (an UPDATE
// that changes no row still takes it), so a pass's records are its own until it commits.
// There is no index of the unpublished records: CREATE INDEX on a column a table made before
// it lacks would fail, and SQLite cannot make one only if the column exists; the relay reads
// the table in processed_at order.
func (SQLite) Relay(t Table) *RelaySQL {
	return &RelaySQL{
		Record:        `UPDATE ` + t.Quoted + ` SET produced = ?, unpublished = 1 WHERE consumer = ? AND message_id = ?`,
		SelectClaim:   `SELECT payload_hash, produced, CASE WHEN unpublished THEN NULL ELSE X'01' END FROM ` + t.Quoted + ` WHERE consumer = ? AND message_id = ?`,
		DeleteExpired: render(`DELETE FROM %[1]s WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?) AND NOT unpublished ORDER BY processed_at LIMIT ?)`, t),
		CountExpired:  `SELECT COUNT(*) FROM ` + t.Quoted + ` WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) AND NOT unpublished`,
		Mark: func(consumers, keys []string) (string, []any) {
			return `UPDATE ` + t.Quoted + ` SET unpublished = 0 WHERE unpublished AND (consumer, message_id) IN (VALUES ` +
				placeholderPairs(len(keys), func(int) string { return "?" }) + `)`, pairs(func(v any) any { return v }, consumers, keys)
		},
		Lock:    `UPDATE ` + t.Quoted + ` SET unpublished = unpublished WHERE 0`,
		Take:    `SELECT consumer, message_id, produced FROM ` + t.Quoted + ` WHERE unpublished AND processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) ORDER BY processed_at LIMIT ?`,
		Backlog: `SELECT COUNT(*), COALESCE(CAST((julianday('now') - julianday(MIN(processed_at))) * 86400000000 AS INTEGER), 0) FROM ` + t.Quoted + ` WHERE unpublished`,
		AddColumn: []string{
			`ALTER TABLE ` + t.Quoted + ` ADD COLUMN unpublished INTEGER NOT NULL DEFAULT 0`,
		},
	}
}

// SchemaLock: [SQLite]'s single writer runs one CREATE at a time.
func (SQLite) SchemaLock() string { return "" }

func (SQLite) DescribeTable(t Table) (string, []any) {
	schema := t.Schema
	if schema == "" {
		schema = "main"
	}
	return sqliteDescribe, []any{t.Name, schema}
}

func (SQLite) ColumnTypes() (key, binary, temporal string) {
	return "TEXT or BLOB with the BINARY collation (no COLLATE NOCASE or RTRIM)", "BLOB", "TEXT"
}

// RetentionIndex counts the indexes of the table (name ?1 in schema ?2) whose first column
// is processed_at.
func (SQLite) RetentionIndex(t Table) (string, []any) {
	schema := t.Schema
	if schema == "" {
		schema = "main"
	}
	return `SELECT COUNT(*) FROM pragma_index_list(?1, ?2) il
WHERE il.partial = 0 AND (SELECT ii.name FROM pragma_index_info(il.name, ?2) ii WHERE ii.seqno = 0) = 'processed_at'`, []any{t.Name, schema}
}

// UpgradeTable: SQLite cannot add a column only if it is missing, so there is no upgrade
// that is safe to run twice; a table made before the column unpublished works without a
// relay, and the table check's refusal of a relay names the statements that add it.
func (SQLite) UpgradeTable(Table) (string, []string, []string) { return "", nil, nil }

// sqliteDescribe describes the table (name ?1 in schema ?2) for the table check. A key
// column's collation is the primary key index's. Exact: TEXT or BLOB affinity (an INTEGER or
// NUMERIC one would store "0123" and "123" as one number) with the BINARY collation. Every
// column holds bytes as they are ([SQLite] never converts a BLOB); processed_at holds the text
// time DeleteExpired compares, unless an INTEGER or REAL affinity made it a number.
const sqliteDescribe = `WITH x AS (
	SELECT cid, name, type, pk, "notnull", dflt_value, hidden,
		CASE
			WHEN instr(upper(type), 'INT') THEN 'integer'
			WHEN instr(upper(type), 'CHAR') OR instr(upper(type), 'CLOB') OR instr(upper(type), 'TEXT') THEN 'text'
			WHEN instr(upper(type), 'BLOB') OR type = '' THEN 'blob'
			WHEN instr(upper(type), 'REAL') OR instr(upper(type), 'FLOA') OR instr(upper(type), 'DOUB') THEN 'real'
			ELSE 'numeric'
		END AS affinity
	FROM pragma_table_xinfo(?1, ?2)
), k AS (
	SELECT ii.name, ii.coll FROM pragma_index_list(?1, ?2) il, pragma_index_xinfo(il.name, ?2) ii
	WHERE il.origin = 'pk' AND ii.key = 1
)
SELECT x.name,
	x.type || CASE WHEN k.coll IS NOT NULL AND upper(k.coll) <> 'BINARY' THEN ' COLLATE ' || k.coll ELSE '' END,
	x.pk,
	x.affinity IN ('text', 'blob') AND upper(COALESCE(k.coll, 'BINARY')) = 'BINARY',
	1,
	x.affinity NOT IN ('integer', 'real'),
	x."notnull" = 0,
	x.dflt_value IS NOT NULL OR x.hidden IN (2, 3),
	''
FROM x LEFT JOIN k ON k.name = x.name
ORDER BY x.cid`

func (SQLite) InsertClaim(t Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES (?, ?, ?)`
}

// InsertClaimOrSkip: none; a duplicate's constraint error leaves the transaction usable.
func (SQLite) InsertClaimOrSkip(Table) string { return "" }

func (SQLite) SelectClaim(t Table) string {
	return `SELECT payload_hash, produced FROM ` + t.Quoted + ` WHERE consumer = ? AND message_id = ?`
}

func (SQLite) UpdateProduced(t Table) string {
	return `UPDATE ` + t.Quoted + ` SET produced = ? WHERE consumer = ? AND message_id = ?`
}

// Param: [SQLite]'s drivers bind every parameter apart from the text.
func (SQLite) Param(value any) any { return value }

// sqliteConstraintPrimaryKey is SQLITE_CONSTRAINT_PRIMARYKEY, the extended result code of a
// primary key violation (a UNIQUE index gives SQLITE_CONSTRAINT_UNIQUE, 2067).
const sqliteConstraintPrimaryKey = 1555

// IsDuplicateKey recognises SQLITE_CONSTRAINT_PRIMARYKEY.
func (SQLite) IsDuplicateKey(err error, _ Table) bool {
	code, ok := sqliteCode(err)
	return ok && code == sqliteConstraintPrimaryKey
}

// IsTransient: SQLITE_BUSY (a busy timeout that ran out) and SQLITE_LOCKED, the database's
// own answer to two writers at once.
func (SQLite) IsTransient(err error) bool {
	code, ok := sqliteCode(err)
	if !ok {
		return false
	}
	switch code & 0xff { // the primary code of an extended one
	case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
		return true
	}
	return false
}

// sqliteCode reads the extended result code of a [SQLite] error: modernc.org/sqlite's *Error has
// a Code() int method, found with [errors.As]; mattn/go-sqlite3's Error has an exported
// ExtendedCode field, read by reflection, so that the library imports no SQLite driver.
func sqliteCode(err error) (int, bool) {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code(), true
	}
	for _, v := range errorFields(err) {
		if code := v.FieldByName("ExtendedCode"); code.IsValid() && code.CanInt() {
			return int(code.Int()), true
		}
	}
	return 0, false
}

func (SQLite) Begin() string { return "BEGIN" }

// commitCheck: a savepoint right after the claim, released before COMMIT, as on [MySQL]; in
// the process, so it costs no round trip.
func (SQLite) commitCheck(Table) (mark, check string, returnsRow bool) {
	return "SAVEPOINT " + claimSavepoint, "RELEASE SAVEPOINT " + claimSavepoint, false
}

// checkFailed recognises SQLite's "no such savepoint" on the claim's.
func (SQLite) checkFailed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such savepoint: "+claimSavepoint)
}

// lexicon: SQLite's quotes and comments (see txGuard).
func (SQLite) lexicon() sqlLexicon { return sqlLexicon{sqlite: true} }

// endsTransaction names the statements that end an [SQLite] transaction: COMMIT, END,
// ROLLBACK, BEGIN. Its data definition is transactional.
func (SQLite) endsTransaction(st sqlStatement) string { return endsTransactionStandard(st) }

// LockTimeout: a pragma takes no parameters; the value is a number formatted here.
func (SQLite) LockTimeout(timeout time.Duration) (string, []any) {
	return "PRAGMA busy_timeout = " + strconv.FormatInt(max(timeout.Milliseconds(), 1), 10), nil
}

// DeleteExpired deletes by primary key: the table is WITHOUT ROWID.
func (SQLite) DeleteExpired(t Table) string {
	return render(`DELETE FROM %[1]s WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?) ORDER BY processed_at LIMIT ?)`, t)
}

func (SQLite) CountExpired(t Table) string {
	return `SELECT COUNT(*) FROM ` + t.Quoted + ` WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)`
}

// Age is a date modifier such as "-3600.000000 seconds".
func (SQLite) Age(olderThan time.Duration) any {
	micros := olderThan.Microseconds()
	return fmt.Sprintf("-%d.%06d seconds", micros/1e6, micros%1e6)
}

// CleanupLock: none. [SQLite]'s single writer runs one batch at a time.
func (SQLite) CleanupLock(Table) (take, release string, key any) { return "", "", nil }

// TableSize: dbstat counts the pages of the table and its index; without it (a build without
// SQLITE_ENABLE_DBSTAT_VTAB, or another schema than main), the file's size.
func (SQLite) TableSize(t Table) []SizeQuery {
	var sizes []SizeQuery
	if t.Schema == "" || t.Schema == "main" {
		sizes = append(sizes, SizeQuery{SQL: "SELECT SUM(pgsize) FROM dbstat WHERE name IN (?, ?)",
			Args: []any{t.Name, indexName(t.Name)}, Note: "dbstat"})
	}
	return append(sizes, SizeQuery{SQL: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
		Note: "the whole database file: page_count * page_size"})
}

func (SQLite) MultiStatement() *MultiStatementSQL { return nil }

package sqlinbox

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
)

// SQLite returns the dialect of SQLite 3.24 or later, through modernc.org/sqlite or github.com/mattn/go-sqlite3.
// Open the database with a busy timeout (modernc.org/sqlite: _pragma=busy_timeout(10000)) so
// concurrent writers wait for each other instead of failing with SQLITE_BUSY. The claim is
// the transaction's first statement, so it takes the write lock at once; a duplicate fails
// it with SQLITE_CONSTRAINT_PRIMARYKEY, which ends the statement but not the transaction.
func SQLite() Dialect {
	return Dialect{
		Name:          "sqlite",
		ValidateTable: sqliteValidateTable,
		QuoteIdentifier: func(identifier string) string {
			return `"` + identifier + `"`
		},
		// SQLite puts the schema on the index's name rather than on its table.
		Schema: func(t Table) []string {
			return []string{
				render(`CREATE TABLE IF NOT EXISTS %s (
	consumer     TEXT NOT NULL,
	message_id   TEXT NOT NULL,
	processed_at TEXT NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')),
	payload_hash BLOB,
	produced     BLOB,
	PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID`, t),
				`CREATE INDEX IF NOT EXISTS ` + sqliteIndex(t) + ` ON "` + t.Name + `" (processed_at)`,
			}
		},

		TableCheck: &TableCheck{
			Describe: func(t Table) (string, []any) {
				schema := t.Schema
				if schema == "" {
					schema = "main"
				}
				return sqliteDescribe, []any{t.Name, schema}
			},
			KeyType:   "TEXT or BLOB with the BINARY collation (no COLLATE NOCASE or RTRIM)",
			BytesType: "BLOB",
			TimeType:  "TEXT",
		},

		Insert:         `INSERT INTO %s (consumer, message_id, payload_hash) VALUES (?, ?, ?)`,
		Prior:          `SELECT payload_hash, produced FROM %s WHERE consumer = ? AND message_id = ?`,
		Record:         `UPDATE %s SET produced = ? WHERE consumer = ? AND message_id = ?`,
		IsDuplicateKey: sqliteDuplicateKey,

		// A pragma takes no parameters; the value is a number we format.
		LockTimeout: func(timeout time.Duration) (string, []any) {
			return "PRAGMA busy_timeout = " + strconv.FormatInt(max(timeout.Milliseconds(), 1), 10), nil
		},

		// The table is WITHOUT ROWID: delete by primary key. SQLite's single writer runs one
		// batch at a time, so cleanups take no lock.
		Cleanup: `DELETE FROM %[1]s WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?) ORDER BY processed_at LIMIT ?)`,
		Expired: `SELECT COUNT(*) FROM %[1]s WHERE processed_at < strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now', ?)`,
		// A date modifier such as "-3600.000000 seconds".
		CleanupAge: func(olderThan time.Duration) any {
			micros := olderThan.Microseconds()
			return fmt.Sprintf("-%d.%06d seconds", micros/1e6, micros%1e6)
		},

		// dbstat counts the pages of the table and its index; without it (a build without
		// SQLITE_ENABLE_DBSTAT_VTAB, or another schema than main), the file's size.
		tableSize: func(t Table) []sizeQuery {
			var sizes []sizeQuery
			if t.Schema == "" || t.Schema == "main" {
				sizes = append(sizes, sizeQuery{
					SQL:  "SELECT SUM(pgsize) FROM dbstat WHERE name IN (?, ?)",
					Args: []any{t.Name, indexName(t.Name)},
					Note: "dbstat",
				})
			}
			return append(sizes, sizeQuery{
				SQL:  "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
				Note: "the whole database file: page_count * page_size",
			})
		},
	}
}

// sqliteDescribe describes the table (name ?1 in schema ?2) for TableCheck. A key column's
// collation is the primary key index's. Exact: TEXT or BLOB affinity (an INTEGER or NUMERIC
// one would store "0123" and "123" as one number) with the BINARY collation. Every column
// holds bytes as they are (SQLite never converts a BLOB); processed_at holds the text time
// Cleanup compares, unless an INTEGER or REAL affinity made it a number.
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

// sqliteValidateTable is ValidateTableName with no schema but main: in SQLite another
// schema is an attached database, which every connection of the store's pool, and of a
// migration tool, would have to ATTACH itself, or the table is not found.
func sqliteValidateTable(table string) error {
	if err := ValidateTableName(table); err != nil {
		return err
	}
	if schema, _, ok := strings.Cut(table, "."); ok && schema != "main" {
		return fmt.Errorf("%w %q: SQLite has no schemas (%s would be an attached database); use the table's name alone",
			inbox.ErrInvalidTableName, table, schema)
	}
	return nil
}

// sqliteIndex is the processed_at index's name, qualified by the table's schema.
func sqliteIndex(t Table) string {
	index := `"` + indexName(t.Name) + `"`
	if t.Schema != "" {
		index = `"` + t.Schema + `".` + index
	}
	return index
}

// sqliteConstraintPrimaryKey is SQLITE_CONSTRAINT_PRIMARYKEY, the extended result code of a
// primary key violation (a UNIQUE index gives SQLITE_CONSTRAINT_UNIQUE, 2067).
const sqliteConstraintPrimaryKey = 1555

// sqliteDuplicateKey recognises SQLITE_CONSTRAINT_PRIMARYKEY. modernc.org/sqlite's *Error
// has a Code() int method that returns the extended code, found with errors.As;
// mattn/go-sqlite3's Error has an exported ExtendedCode field, read by reflection, so that
// the library imports no SQLite driver.
func sqliteDuplicateKey(err error, _ Table) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code() == sqliteConstraintPrimaryKey
	}
	for _, e := range errorChain(err) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if code := v.FieldByName("ExtendedCode"); code.IsValid() && code.CanInt() {
			return code.Int() == sqliteConstraintPrimaryKey
		}
	}
	return false
}

package sqlinbox

import (
	"reflect"
	"strings"
	"time"
)

// MySQL returns the dialect of MySQL and MariaDB with InnoDB, through github.com/go-sql-driver/mysql. Set
// interpolateParams=true in its DSN to save the prepare round trips of every statement.
//
// The claim is a plain INSERT: a duplicate fails with error 1062 on the key PRIMARY, which
// InnoDB reports without ending the transaction, and the claim then reads the prior row. It
// reads no affected-row count, so no DSN setting (clientFoundRows among them) changes what
// a claim returns.
func MySQL() Dialect {
	return Dialect{
		Name:          "mysql",
		ValidateTable: ValidateTableName,
		QuoteIdentifier: func(identifier string) string {
			return "`" + identifier + "`"
		},
		// VARBINARY key columns compare bytes exactly (the default collations would make "A"
		// and "a" one key). The processed_at index is inside CREATE TABLE: MySQL has no CREATE
		// INDEX IF NOT EXISTS.
		Schema: func(t Table) []string {
			return []string{render(`CREATE TABLE IF NOT EXISTS %s (
	consumer     VARBINARY(255) NOT NULL,
	message_id   VARBINARY(255) NOT NULL,
	processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	payload_hash VARBINARY(64),
	produced     LONGBLOB,
	PRIMARY KEY (consumer, message_id),
	INDEX processed_at (processed_at)
) ENGINE=InnoDB`, t)}
		},

		TableCheck: &TableCheck{
			Describe: func(t Table) (string, []any) {
				var schema any
				if t.Schema != "" {
					schema = t.Schema
				}
				return mysqlDescribe, []any{schema, t.Name}
			},
			KeyType:   "VARBINARY, or VARCHAR CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin (MariaDB) or utf8mb4_0900_bin (MySQL)",
			BytesType: "VARBINARY or a BLOB type",
			TimeType:  "DATETIME(6)",
		},

		Insert:         "INSERT INTO %s (consumer, message_id, payload_hash) VALUES (?, ?, ?)",
		Prior:          "SELECT payload_hash, produced FROM %s WHERE consumer = ? AND message_id = ?",
		Record:         "UPDATE %s SET produced = ? WHERE consumer = ? AND message_id = ?",
		IsDuplicateKey: mysqlDuplicateKey,

		// MySQL stops a multi-statement request at the first error, and InnoDB keeps the
		// transaction open after a duplicate key. Not on a Galera node (MariaDB Galera
		// Cluster, Percona XtraDB Cluster): when another node's write-set aborts the
		// transaction partway through a request, the server runs the rest of it in
		// autocommit, and may even report success. Plain MySQL has no wsrep_on; plain
		// MariaDB reports OFF.
		MultiStatement: &MultiStatementSQL{Probe: "DO ?; DO ?", Refuse: "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'"},

		// Whole seconds, at least 1. InnoDB has no per-transaction setting: this one is the
		// session's, kept by the connection after the transaction, and the same value is set
		// again at the start of every inbox transaction (Config.LockTimeout says so).
		LockTimeout: func(timeout time.Duration) (string, []any) {
			return "SET SESSION innodb_lock_wait_timeout = ?", []any{(max(timeout.Milliseconds(), 1) + 999) / 1000}
		},

		// The processed_at index gives the oldest rows; LIMIT bounds the batch.
		Cleanup:    "DELETE FROM %[1]s WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?",
		Expired:    "SELECT COUNT(*) FROM %[1]s WHERE processed_at < NOW(6) - INTERVAL ? MICROSECOND",
		CleanupAge: func(olderThan time.Duration) any { return olderThan.Microseconds() },
		// Named locks are server-wide: the name holds the database and the table, hashed to
		// stay under the 64-character limit. MySQL has no named lock that ends with a
		// transaction, so this one stays a session lock, taken, used and released on the one
		// connection the pass runs on; the server releases it when that connection closes. A
		// multiplexing pooler must keep the session on one backend connection from GET_LOCK to
		// RELEASE_LOCK: ProxySQL documents that it stops multiplexing a client connection that
		// calls GET_LOCK, for as long as it lives (not tested here: CI has no ProxySQL).
		CleanupLock:   "SELECT GET_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))), 0)",
		CleanupUnlock: "SELECT RELEASE_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))))",
		CleanupLockKey: func(t Table) any {
			if t.Schema != "" {
				return t.Schema + "." + t.Name
			}
			return t.Name
		},

		tableSize: func(t Table) []sizeQuery {
			var schema any
			if t.Schema != "" {
				schema = t.Schema
			}
			return []sizeQuery{{
				SQL: "SELECT data_length + index_length FROM information_schema.tables " +
					"WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
				Args: []any{schema, t.Name},
				Note: "data_length + index_length: InnoDB's estimate",
			}}
		},
	}
}

// mysqlDescribe describes the table (schema ?, default DATABASE(); name ?) for TableCheck.
// Exact: VARBINARY, or VARCHAR in utf8mb4 with a binary NO PAD collation, and no prefix in the
// primary key. Refused: PAD SPACE collations, utf8mb4_bin among them ('k' and 'k ' are one
// key); BINARY(n) and CHAR(n), which pad the value, so that the read of a duplicate's record
// finds nothing (BINARY) or two keys are one (CHAR). MariaDB's information_schema has no
// PAD_ATTRIBUTE, so the collation is known by name. MariaDB writes a nullable column without
// a default as the default 'NULL'.
const mysqlDescribe = `SELECT c.COLUMN_NAME,
	CONCAT(c.COLUMN_TYPE, IF(c.COLLATION_NAME IS NULL, '', CONCAT(' COLLATE ', c.COLLATION_NAME))),
	COALESCE(k.SEQ_IN_INDEX, 0),
	(c.DATA_TYPE = 'varbinary' OR (c.DATA_TYPE = 'varchar' AND c.CHARACTER_SET_NAME = 'utf8mb4'
		AND (c.COLLATION_NAME LIKE '%\_nopad\_bin' OR c.COLLATION_NAME = 'utf8mb4_0900_bin'))) AND k.SUB_PART IS NULL,
	c.DATA_TYPE IN ('varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob'),
	c.DATA_TYPE IN ('datetime', 'timestamp'),
	c.IS_NULLABLE = 'YES',
	(c.COLUMN_DEFAULT IS NOT NULL AND c.COLUMN_DEFAULT <> 'NULL') OR c.EXTRA LIKE '%GENERATED%' OR c.EXTRA LIKE '%auto_increment%',
	IF(EXISTS (SELECT 1 FROM information_schema.STATISTICS p WHERE p.TABLE_SCHEMA = c.TABLE_SCHEMA
		AND p.TABLE_NAME = c.TABLE_NAME AND p.INDEX_NAME = 'PRIMARY'), 'PRIMARY', '')
FROM information_schema.COLUMNS c
LEFT JOIN information_schema.STATISTICS k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
	AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY'
WHERE c.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND c.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION`

// mysqlDuplicateKey recognises error 1062 (ER_DUP_ENTRY) on the key PRIMARY. MySQL ends its
// message with "for key '<table>.PRIMARY'", MariaDB with "for key 'PRIMARY'"; the entry,
// which holds the claimed key, comes before it, so only the end of the message is read.
//
// go-sql-driver/mysql returns a *MySQLError with the exported fields Number and Message. The
// library reads those two fields by reflection, on each error in err's chain, so that it
// imports no MySQL driver; another driver's errors need a dialect whose IsDuplicateKey reads
// them (start from a copy of MySQL).
func mysqlDuplicateKey(err error, t Table) bool {
	for _, e := range errorChain(err) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		number, message := v.FieldByName("Number"), v.FieldByName("Message")
		if !number.IsValid() || !number.CanUint() || message.Kind() != reflect.String {
			continue
		}
		if number.Uint() != 1062 {
			return false
		}
		m := message.String()
		return strings.HasSuffix(m, " for key 'PRIMARY'") || strings.HasSuffix(m, " for key '"+t.Name+".PRIMARY'")
	}
	return false
}

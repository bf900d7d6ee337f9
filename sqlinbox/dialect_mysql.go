package sqlinbox

import (
	"encoding/hex"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// MySQL is the dialect of MySQL and MariaDB with InnoDB, through
// github.com/go-sql-driver/mysql. Set interpolateParams=true in its DSN to save the prepare
// round trips of every statement.
//
// The claim is a plain INSERT: a duplicate fails with error 1062 on the key PRIMARY, which
// InnoDB reports without ending the transaction, and the claim then reads the prior row. It
// reads no affected-row count, so no DSN setting (clientFoundRows among them) changes what a
// claim returns. The inbox's own values travel hex-encoded and are decoded by UNHEX in the
// statements (see Param).
//
// A store on this dialect refuses a connection whose character_set_client is big5, cp932,
// gb18030, gbk or sjis, in which the driver's client-side escaping of the application's
// parameters can be undone: its table check (CheckTable, InitializeSchema) and every claim
// fail with an error that names the character set. It also refuses a queued statement
// that sets sql_mode, NAMES, CHARACTER SET or a character_set_ variable. See docs/mysql.md.
type MySQL struct{}

func (MySQL) dialect() {}

// RequestLimit: the server refuses a request (or, prepared, a parameter) longer than
// max_allowed_packet, and closes the connection.
func (MySQL) RequestLimit() string { return "SELECT @@max_allowed_packet" }

func (MySQL) Name() string { return "mysql" }

func (MySQL) ParseTable(name string) (Table, error) {
	return parseQualified(name, func(identifier string) string { return "`" + identifier + "`" })
}

// CreateTable: VARBINARY key columns compare bytes exactly (the default collations would make
// "A" and "a" one key). processed_at is the time in UTC, which no session's time zone changes
// (see DeleteExpired); an expression default needs MariaDB 10.2 or [MySQL] 8.0.13. The
// processed_at index is inside CREATE TABLE: MySQL has no CREATE INDEX IF NOT EXISTS. A
// table qualified by a database creates that database first if it does not exist, so that a
// migration runs on a new server.
func (MySQL) CreateTable(t Table) []string {
	var database []string
	if t.Schema != "" {
		database = []string{"CREATE DATABASE IF NOT EXISTS `" + t.Schema + "`"}
	}
	return append(database, `CREATE TABLE IF NOT EXISTS `+t.Quoted+` (
	consumer     VARBINARY(255) NOT NULL,
	message_id   VARBINARY(255) NOT NULL,
	processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	payload_hash VARBINARY(64),
	produced     LONGBLOB,
	unpublished  BOOLEAN NOT NULL DEFAULT FALSE,
	PRIMARY KEY (consumer, message_id),
	INDEX processed_at (processed_at),
	INDEX unpublished (unpublished, processed_at)
) ENGINE=InnoDB`)
}

// Relay: FOR UPDATE SKIP LOCKED (MariaDB 10.6, [MySQL] 8.0) lets two relays' passes take
// disjoint records; the (unpublished, processed_at) index finds them without reading the
// claims. Mark names no column but the key's, so that InnoDB finds its rows by the primary
// key and locks only them: a scan of the unpublished index would also lock that index's
// gaps, where the claims committing beside it insert their records' entries.
func (MySQL) Relay(t Table) *RelaySQL {
	return &RelaySQL{
		Record:        "UPDATE " + t.Quoted + " SET produced = UNHEX(?), unpublished = TRUE WHERE consumer = UNHEX(?) AND message_id = UNHEX(?)",
		SelectClaim:   "SELECT payload_hash, produced, IF(unpublished, NULL, X'01') FROM " + t.Quoted + " WHERE consumer = UNHEX(?) AND message_id = UNHEX(?)",
		DeleteExpired: "DELETE FROM " + t.Quoted + " WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND NOT unpublished ORDER BY processed_at LIMIT ?",
		CountExpired:  "SELECT COUNT(*) FROM " + t.Quoted + " WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND NOT unpublished",
		Mark: func(consumers, keys []string) (string, []any) {
			return "UPDATE " + t.Quoted + " SET unpublished = FALSE WHERE (consumer, message_id) IN (" +
				placeholderPairs(len(keys), func(int) string { return "UNHEX(?)" }) + ")", pairs(MySQL{}.Param, consumers, keys)
		},
		Take:    "SELECT consumer, message_id, produced FROM " + t.Quoted + " WHERE unpublished AND processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ? FOR UPDATE SKIP LOCKED",
		Backlog: "SELECT COUNT(*), COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(processed_at), UTC_TIMESTAMP(6)), 0) FROM " + t.Quoted + " WHERE unpublished",
		AddColumn: []string{
			"ALTER TABLE " + t.Quoted + " ADD COLUMN unpublished BOOLEAN NOT NULL DEFAULT FALSE, ADD INDEX unpublished (unpublished, processed_at)",
		},
	}
}

// SchemaLock: [MySQL]'s DDL commits on its own; CREATE TABLE IF NOT EXISTS is safe at once.
func (MySQL) SchemaLock() string { return "" }

func (MySQL) DescribeTable(t Table) (string, []any) {
	var schema any
	if t.Schema != "" {
		schema = t.Schema
	}
	return mysqlDescribe, []any{schema, t.Name}
}

func (MySQL) ColumnTypes() (key, binary, temporal string) {
	return "VARBINARY, or VARCHAR CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin (MariaDB) or utf8mb4_0900_bin (MySQL)",
		"VARBINARY or a BLOB type", "DATETIME(6) DEFAULT (UTC_TIMESTAMP(6)), the time in UTC whatever the session's time zone"
}

// mysqlDescribe describes the table (schema ?, default DATABASE(); name ?) for the table
// check. Exact: VARBINARY, or VARCHAR in utf8mb4 with a binary NO PAD collation, and no prefix
// in the primary key. Refused: PAD SPACE collations, utf8mb4_bin among them ('k' and 'k '
// are one key); BINARY(n) and CHAR(n), which pad the value, so that the read of a
// duplicate's record finds nothing (BINARY) or two keys are one (CHAR). MariaDB's
// information_schema has no PAD_ATTRIBUTE, so the collation is known by name. MariaDB writes
// a nullable column without a default as the default 'NULL'. Temporal: a DATETIME whose
// default is UTC_TIMESTAMP, which DeleteExpired compares with UTC_TIMESTAMP; the type of a
// DATETIME or TIMESTAMP column is written with its default, which names what an older table
// has (CURRENT_TIMESTAMP: the session's local time; a TIMESTAMP converts from and to it).
const mysqlDescribe = `SELECT c.COLUMN_NAME,
	CONCAT(c.COLUMN_TYPE, IF(c.COLLATION_NAME IS NULL, '', CONCAT(' COLLATE ', c.COLLATION_NAME)),
		IF(c.DATA_TYPE IN ('datetime', 'timestamp'), CONCAT(' DEFAULT ', COALESCE(c.COLUMN_DEFAULT, 'NULL')), '')),
	COALESCE(k.SEQ_IN_INDEX, 0),
	(c.DATA_TYPE = 'varbinary' OR (c.DATA_TYPE = 'varchar' AND c.CHARACTER_SET_NAME = 'utf8mb4'
		AND (c.COLLATION_NAME LIKE '%\_nopad\_bin' OR c.COLLATION_NAME = 'utf8mb4_0900_bin'))) AND k.SUB_PART IS NULL,
	c.DATA_TYPE IN ('varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob'),
	c.DATA_TYPE = 'datetime' AND LOWER(c.COLUMN_DEFAULT) LIKE 'utc\_timestamp%',
	c.IS_NULLABLE = 'YES',
	(c.COLUMN_DEFAULT IS NOT NULL AND c.COLUMN_DEFAULT <> 'NULL') OR c.EXTRA LIKE '%GENERATED%' OR c.EXTRA LIKE '%auto_increment%',
	IF(EXISTS (SELECT 1 FROM information_schema.STATISTICS p WHERE p.TABLE_SCHEMA = c.TABLE_SCHEMA
		AND p.TABLE_NAME = c.TABLE_NAME AND p.INDEX_NAME = 'PRIMARY'), 'PRIMARY', '')
FROM information_schema.COLUMNS c
LEFT JOIN information_schema.STATISTICS k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
	AND k.COLUMN_NAME = c.COLUMN_NAME AND k.INDEX_NAME = 'PRIMARY'
WHERE c.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND c.TABLE_NAME = ?
ORDER BY c.ORDINAL_POSITION`

// RetentionIndex counts the indexes of the table (schema ?, default DATABASE(); name ?) whose
// first column is processed_at.
func (MySQL) RetentionIndex(t Table) (string, []any) {
	var schema any
	if t.Schema != "" {
		schema = t.Schema
	}
	return `SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = 'processed_at' AND SEQ_IN_INDEX = 1`, []any{schema, t.Name}
}

// UpgradeTable adds the column unpublished and its index if the table lacks them (see
// [RelaySQL]), and moves a table made before processed_at was the time in UTC (DEFAULT
// CURRENT_TIMESTAMP(6), the claiming session's local time) to UTC: the claims it holds are
// converted from the time zone of the session that runs the migration, which must be the
// zone the services' sessions had (the DSN's time_zone, else the server's), and the default
// becomes UTC_TIMESTAMP(6). The table is locked meanwhile, so that no claim is made between
// the conversion and the new default: claims wait for the migration. A claim whose
// conversion fails (outside TIMESTAMP's range) keeps its time. The conversion runs only
// while the default is the old one, so a second run, or a run on a table CreateTable made,
// changes nothing; the down migration converts back only while the default is UTC's.
func (MySQL) UpgradeTable(t Table) (name string, up, down []string) {
	schema := "DATABASE()"
	if t.Schema != "" {
		schema = "'" + t.Schema + "'" // a validated identifier holds no quote
	}
	defaultIs := func(prefix string) string {
		return "(SELECT LOWER(c.COLUMN_DEFAULT) FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = " + schema +
			" AND c.TABLE_NAME = '" + t.Name + "' AND c.COLUMN_NAME = 'processed_at') LIKE '" + prefix + "%'"
	}
	convert := func(from, to, oldDefault, newDefault string) []string {
		return []string{
			"LOCK TABLES " + t.Quoted + " WRITE",
			"UPDATE " + t.Quoted + " SET processed_at = COALESCE(CONVERT_TZ(processed_at, " + from + ", " + to + "), processed_at) WHERE " + defaultIs(oldDefault),
			"ALTER TABLE " + t.Quoted + " ALTER COLUMN processed_at SET DEFAULT " + newDefault,
			"UNLOCK TABLES",
		}
	}
	// ALTER TABLE has no IF NOT EXISTS on [MySQL]: the statement is chosen by the catalog and
	// run as a prepared one.
	ifColumn := func(exists bool, statement string) []string {
		test := "NOT EXISTS"
		if exists {
			test = "EXISTS"
		}
		return []string{
			"SET @inbox_upgrade = IF(" + test + " (SELECT 1 FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = " + schema +
				" AND c.TABLE_NAME = '" + t.Name + "' AND c.COLUMN_NAME = 'unpublished'), '" + statement + "', 'DO 0')",
			"PREPARE inbox_upgrade FROM @inbox_upgrade",
			"EXECUTE inbox_upgrade",
			"DEALLOCATE PREPARE inbox_upgrade",
		}
	}
	up = append(convert("@@session.time_zone", "'+00:00'", `current\_timestamp`, "(UTC_TIMESTAMP(6))"),
		ifColumn(false, MySQL{}.Relay(t).AddColumn[0])...)
	down = append(ifColumn(true, "ALTER TABLE "+t.Quoted+" DROP INDEX unpublished, DROP COLUMN unpublished"),
		convert("'+00:00'", "@@session.time_zone", `utc\_timestamp`, "CURRENT_TIMESTAMP(6)")...)
	return "utc_processed_at_unpublished", up, down
}

// InsertClaim carries the store's guard against a connection in a character set that
// client-side escaping is not safe in (see mysqlUnsafeCharsets): on such a connection the
// consumer is NULL, which the NOT NULL column refuses with error 1048 in every sql_mode, so
// that no claim is made and, in the claim-first mode, the handler does not run. The guard
// travels in the claim, which every store and mode sends first: it costs no statement and no
// round trip, and it reads the session as it is at that moment, whatever SET NAMES ran on
// the connection before.
func (MySQL) InsertClaim(t Table) string {
	return "INSERT INTO " + t.Quoted + " (consumer, message_id, payload_hash) VALUES (" +
		"UNHEX(IF(@@character_set_client IN (" + mysqlUnsafeCharsets + "), NULL, ?)), UNHEX(?), UNHEX(?))"
}

// mysqlUnsafeCharsets are the character sets in which the second byte of a multibyte
// character can be 0x5c, a backslash: go-sql-driver/mysql with interpolateParams=true
// escapes a parameter's quote as \' byte by byte, and a lead byte before the backslash makes
// the two one character, so that the quote ends the string. utf8mb4, utf8mb3, latin1,
// gb2312, euckr, ujis and eucjpms are safe: none of their multibyte characters holds a byte
// below 0x80. gb18030 is [MySQL]'s (8.0); MariaDB has none of that name.
const mysqlUnsafeCharsets = "'big5', 'cp932', 'gb18030', 'gbk', 'sjis'"

// charsetQuery reads the session's character_set_client, for the check at start-up and to
// name the character set of a claim the guard refused.
func (MySQL) charsetQuery() string { return "SELECT @@character_set_client" }

// unsafeCharset reports whether charset is one of mysqlUnsafeCharsets.
func (MySQL) unsafeCharset(charset string) bool {
	return strings.Contains(mysqlUnsafeCharsets, "'"+strings.ToLower(charset)+"'")
}

// mayBeCharsetRefusal reports whether err could be the claim's guard: error 1048 on the
// column consumer. A statement of the application's on another table can fail the same way,
// so the store reads the session's character set before it says so.
func (MySQL) mayBeCharsetRefusal(err error) bool {
	number, message, ok := mysqlError(err)
	return ok && number == 1048 && strings.Contains(message, "'consumer'")
}

// sessionChange returns what a queued statement changes of how the server reads the
// statements after it, or "": a SET of sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES), of
// NAMES, CHARACTER SET or CHARSET, or of a character_set_ variable. The driver writes the
// parameters of every statement of a request into its text before the server runs the first,
// by the session's state as it was before the request, so a statement after such a SET could
// be read otherwise than it was escaped; a SET STATEMENT ... FOR is refused as well.
//
// PREPARE and EXECUTE are refused as well ("PREPARE", "EXECUTE"): the statement they prepare
// and run is text the store cannot read (PREPARE s FROM @text), a SET NAMES among others.
func (MySQL) sessionChange(statement string) string {
	text := strings.ToLower(skipLeadingComments(statement))
	for _, prepared := range []string{"prepare", "execute"} {
		if strings.HasPrefix(text, prepared) && (len(text) == len(prepared) || !isIdentifierByte(text[len(prepared)])) {
			return strings.ToUpper(prepared)
		}
	}
	if !strings.HasPrefix(text, "set") || (len(text) > 3 && isIdentifierByte(text[3])) {
		return ""
	}
	if m := mysqlSessionChange.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

// mysqlSessionChange finds what sessionChange refuses in a lower-cased SET statement: a
// system variable, not a user variable (@sql_mode), nor part of another name.
var mysqlSessionChange = regexp.MustCompile(`(?:^|[^\w@$]|@@)(sql_mode|names|charset|character\s+set|character_set_[a-z_]+)(?:[^\w$]|$)`)

// commitCheck: a savepoint right after the claim, released before COMMIT: COMMIT, ROLLBACK, a
// new transaction and every implicit commit drop it, and its RELEASE then fails with error 1305
// (there is no transaction id to compare, as on PostgreSQL, that every server version shows).
func (MySQL) commitCheck(Table) (mark, check string, returnsRow bool) {
	return "SAVEPOINT " + claimSavepoint, "RELEASE SAVEPOINT " + claimSavepoint, false
}

// checkFailed recognises error 1305 (ER_SP_DOES_NOT_EXIST) on the claim's savepoint.
func (MySQL) checkFailed(err error) bool {
	number, message, ok := mysqlError(err)
	return ok && number == 1305 && strings.Contains(message, claimSavepoint)
}

// lexicon: MySQL's quotes and comments (see txGuard).
func (MySQL) lexicon() sqlLexicon { return sqlLexicon{mysql: true} }

// endsTransaction names the statements that end a [MySQL] transaction: COMMIT, ROLLBACK, BEGIN,
// START TRANSACTION, XA, and the statements that commit it implicitly before they run
// (data definition but of temporary tables, account management, table maintenance, LOCK and
// UNLOCK TABLES, SET autocommit, SET PASSWORD, FLUSH, RESET, plugins). A stored procedure that
// commits (CALL) is not seen: its text is on the server.
func (MySQL) endsTransaction(st sqlStatement) string {
	if what := endsTransactionStandard(st); what != "" {
		return what
	}
	w := st.word(0)
	switch {
	case (w == "create" || w == "drop") && st.word(1) == "temporary":
		return "" // a temporary table's DDL commits nothing
	case w == "set" && (st.word(1) == "password" || mysqlAutocommit.MatchString(st.text)),
		(w == "cache" || w == "load") && st.word(1) == "index",
		mysqlImplicitCommits[w]:
		return "an implicit commit (" + strings.ToUpper(strings.Join(st.words, " ")) + ")"
	}
	return ""
}

// mysqlImplicitCommits are the first words of the statements that commit a transaction
// implicitly (the manual's "Statements That Cause an Implicit Commit").
var mysqlImplicitCommits = map[string]bool{
	"alter": true, "create": true, "drop": true, "rename": true, "truncate": true,
	"grant": true, "revoke": true, "analyze": true, "optimize": true, "repair": true,
	"flush": true, "reset": true, "install": true, "uninstall": true,
	"lock": true, "unlock": true, "xa": true,
}

// mysqlAutocommit finds a SET of autocommit, which commits the transaction when it turns it on.
var mysqlAutocommit = regexp.MustCompile(`(?:^|[^\w@$]|@@)autocommit(?:[^\w$]|$)`)

// InsertClaimOrSkip: none; a duplicate's error 1062 leaves InnoDB's transaction usable.
func (MySQL) InsertClaimOrSkip(Table) string { return "" }

func (MySQL) SelectClaim(t Table) string {
	return "SELECT payload_hash, produced FROM " + t.Quoted + " WHERE consumer = UNHEX(?) AND message_id = UNHEX(?)"
}

func (MySQL) UpdateProduced(t Table) string {
	return "UPDATE " + t.Quoted + " SET produced = UNHEX(?) WHERE consumer = UNHEX(?) AND message_id = UNHEX(?)"
}

// Param hex-encodes the inbox's own values, which the statements decode with UNHEX. With
// interpolateParams=true the driver writes parameters into the statement's text on the
// client, escaping them as if the connection's character set were ASCII-safe: on a
// connection in GBK, SJIS, CP932 or BIG5 a multibyte character can swallow the escaping
// backslash, and a string parameter could end its literal. Hex digits read the same in every
// character set and whatever the sql_mode, so no key, consumer, fingerprint or record of
// produced messages can.
func (MySQL) Param(value any) any {
	switch v := value.(type) {
	case string:
		return hex.EncodeToString([]byte(v))
	case []byte:
		if v == nil {
			return nil
		}
		return hex.EncodeToString(v)
	}
	return value
}

// IsDuplicateKey recognises error 1062 (ER_DUP_ENTRY) on the key PRIMARY. [MySQL] ends its
// message with "for key '<table>.PRIMARY'", MariaDB with "for key 'PRIMARY'"; the entry,
// which holds the claimed key, comes before it, so only the end of the message is read.
func (MySQL) IsDuplicateKey(err error, t Table) bool {
	number, message, ok := mysqlError(err)
	if !ok || number != 1062 {
		return false
	}
	return strings.HasSuffix(message, " for key 'PRIMARY'") || strings.HasSuffix(message, " for key '"+t.Name+".PRIMARY'")
}

// IsTransient: the server's errors of a database that fails the statement, not the message,
// by their number: a state of the server or a race between transactions, which a later attempt
// gets past and which no message's content causes. It says nothing of where the error was
// raised: the store tells its own session's failures (go-sql-driver/mysql's "invalid
// connection" among them) by the session, not by the error (see Store.IsTransient).
func (MySQL) IsTransient(err error) bool {
	number, _, ok := mysqlError(err)
	if !ok {
		return false
	}
	_, transient := mysqlTransient[number]
	return transient
}

// mysqlTransient are the server's errors that a later attempt gets past.
var mysqlTransient = map[uint64]string{
	1205: "ER_LOCK_WAIT_TIMEOUT: Config.LockTimeout, innodb_lock_wait_timeout",
	1213: "ER_LOCK_DEADLOCK; on Galera also a certification failure",
	1047: "ER_UNKNOWN_COM_ERROR: a Galera node that is not synced (WSREP has not yet prepared node)",
	1040: "ER_CON_COUNT_ERROR: too many connections",
	1053: "ER_SERVER_SHUTDOWN",
	1290: "ER_OPTION_PREVENTS_STATEMENT: --read-only, as on a replica",
	1792: "ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION",
	1836: "ER_READ_ONLY_MODE",
	1927: "ER_CONNECTION_KILLED (MariaDB)",
	1158: "ER_NET_READ_ERROR",
	1159: "ER_NET_READ_INTERRUPTED",
	1160: "ER_NET_ERROR_ON_WRITE",
	1161: "ER_NET_WRITE_INTERRUPTED",
}

// mysqlError reads the number and message of go-sql-driver/mysql's *MySQLError, the first
// error in err's chain with the exported fields Number and Message. It reads them by
// reflection, so that the library imports no [MySQL] driver; another driver's errors need a
// dialect of its own whose IsDuplicateKey and IsTransient read them.
func mysqlError(err error) (number uint64, message string, ok bool) {
	for _, v := range errorFields(err) {
		n, m := v.FieldByName("Number"), v.FieldByName("Message")
		if n.IsValid() && n.CanUint() && m.Kind() == reflect.String {
			return n.Uint(), m.String(), true
		}
	}
	return 0, "", false
}

func (MySQL) Begin() string { return "START TRANSACTION" }

// LockTimeout is in whole seconds, at least 1. InnoDB has no per-transaction setting: this one
// is the session's, kept by the connection after the transaction, and the same value is set
// again at the start of every inbox transaction ([Config.LockTimeout] says so).
func (MySQL) LockTimeout(timeout time.Duration) (string, []any) {
	return "SET SESSION innodb_lock_wait_timeout = ?", []any{(max(timeout.Milliseconds(), 1) + 999) / 1000}
}

// DeleteExpired compares processed_at, the time in UTC of the claim (CreateTable's default),
// with UTC_TIMESTAMP: neither depends on a session's time zone (the DSN's time_zone, or the
// server's), which may differ between the claiming services and the cleanup, and whose
// daylight-saving changes would move a local time by an hour. The processed_at index gives
// the oldest rows; LIMIT bounds the batch.
func (MySQL) DeleteExpired(t Table) string {
	return "DELETE FROM " + t.Quoted + " WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?"
}

func (MySQL) CountExpired(t Table) string {
	return "SELECT COUNT(*) FROM " + t.Quoted + " WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
}

func (MySQL) Age(olderThan time.Duration) any { return olderThan.Microseconds() }

// CleanupLock is a named lock. Named locks are server-wide: the name holds the database and
// the table, hashed to stay under the 64-character limit. [MySQL] has no named lock that ends
// with a transaction, so this one is a session lock, taken, used and released on the one
// connection the pass runs on; the server releases it when that connection closes. A
// multiplexing pooler must keep the session on one backend connection from GET_LOCK to
// RELEASE_LOCK: ProxySQL documents that it stops multiplexing a client connection that calls
// GET_LOCK, for as long as it lives.
func (MySQL) CleanupLock(t Table) (take, release string, key any) {
	key = t.Name
	if t.Schema != "" {
		key = t.Schema + "." + t.Name
	}
	return "SELECT GET_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))), 0)",
		"SELECT RELEASE_LOCK(CONCAT('inbox_cleanup_', SHA1(CONCAT_WS('.', DATABASE(), ?))))", key
}

func (MySQL) TableSize(t Table) []SizeQuery {
	var schema any
	if t.Schema != "" {
		schema = t.Schema
	}
	return []SizeQuery{{
		SQL: "SELECT data_length + index_length FROM information_schema.tables " +
			"WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
		Args: []any{schema, t.Name},
		Note: "data_length + index_length: InnoDB's estimate",
	}}
}

// MultiStatement: [MySQL] stops a multi-statement request at the first error, and InnoDB keeps
// the transaction open after a duplicate key. Not on a Galera node (MariaDB Galera Cluster,
// Percona XtraDB Cluster): when another node's write-set aborts the transaction partway
// through a request, the server runs the rest of it in autocommit, and may even report
// success. Plain MySQL has no wsrep_on; plain MariaDB reports OFF.
func (MySQL) MultiStatement() *MultiStatementSQL {
	return &MultiStatementSQL{Probe: "DO ?; DO ?", Refuse: "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'"}
}

// skipLeadingComments returns statement after its leading white space and comments. The
// text of an executable comment (/*! ... */, MariaDB's /*M! ... */) is a statement's, so
// only its opening and version number are skipped.
func skipLeadingComments(statement string) string {
	for {
		statement = strings.TrimLeft(statement, " \t\r\n\f\v")
		switch {
		case strings.HasPrefix(statement, "/*!"), strings.HasPrefix(statement, "/*M!"):
			statement = strings.TrimLeft(statement[strings.Index(statement, "!")+1:], "0123456789")
		case strings.HasPrefix(statement, "/*"):
			end := strings.Index(statement[2:], "*/")
			if end < 0 {
				return ""
			}
			statement = statement[2+end+2:]
		case strings.HasPrefix(statement, "#"), strings.HasPrefix(statement, "--") &&
			(len(statement) == 2 || strings.ContainsRune(" \t\r\n\f\v", rune(statement[2]))):
			end := strings.IndexByte(statement, '\n')
			if end < 0 {
				return ""
			}
			statement = statement[end+1:]
		default:
			return statement
		}
	}
}

func isIdentifierByte(b byte) bool {
	return b == '_' || b == '$' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= 0x80
}

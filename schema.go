package inbox

import (
	"fmt"
	"strings"
)

// The inbox table holds one row per message a consumer has processed:
//
//	consumer      the consumer (inbox partition) that processed the message
//	message_id    the message's idempotency key (msg.UUID by default)
//	processed_at  when the claim was made, for retention
//	payload_hash  the payload's fingerprint (SHA-256 by default), to catch reused keys
//	produced      the messages the handler returned, to publish again on a redelivery
//	PRIMARY KEY (consumer, message_id)
//
// The primary key is the guard against duplicates: the claim is an insert that skips a
// conflict on it, so two copies of a message can never both be claimed, however they race.
const (
	// DefaultTable is the table name used when none is configured.
	DefaultTable = "inbox"
	// MaxConsumerLength is the longest consumer name, in bytes, that the table holds.
	MaxConsumerLength = 255
	// MaxKeyLength is the longest idempotency key, in bytes, that the table holds.
	MaxKeyLength = 255
	// maxIdentifierLength is PostgreSQL's limit (MySQL allows 64, SQLite more).
	maxIdentifierLength = 63
)

// The SQL dialects whose DDL is defined here. sqlinbox.Dialect values name one of them.
const (
	DialectPostgres = "postgres"
	DialectMySQL    = "mysql"
	DialectSQLite   = "sqlite"
)

// The DDL per dialect; %s is the quoted table name. The key columns hold MaxKeyLength bytes
// and compare bytes exactly: collation "C" on PostgreSQL (also the fastest to index),
// VARBINARY on MySQL (whose default collations would make "A" and "a" one key).
var createTableSQL = map[string]string{
	DialectPostgres: `CREATE TABLE IF NOT EXISTS %s (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	PRIMARY KEY (consumer, message_id)
)`,
	DialectMySQL: `CREATE TABLE IF NOT EXISTS %s (
	consumer     VARBINARY(255) NOT NULL,
	message_id   VARBINARY(255) NOT NULL,
	processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	payload_hash VARBINARY(64),
	produced     LONGBLOB,
	PRIMARY KEY (consumer, message_id),
	INDEX processed_at (processed_at)
) ENGINE=InnoDB`,
	DialectSQLite: `CREATE TABLE IF NOT EXISTS %s (
	consumer     TEXT NOT NULL,
	message_id   TEXT NOT NULL,
	processed_at TEXT NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')),
	payload_hash BLOB,
	produced     BLOB,
	PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID`,
}

// The processed_at index lets retention find old rows without reading the whole table.
// MySQL has it inside CREATE TABLE (MySQL has no CREATE INDEX IF NOT EXISTS); SQLite puts a
// schema on the index's name rather than on its table.
var createIndexSQL = map[string]string{
	DialectPostgres: `CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (processed_at)`,
	DialectSQLite:   `CREATE INDEX IF NOT EXISTS %[3]s ON %[4]s (processed_at)`,
}

// SchemaStatements returns the statements that create the inbox table named table in dialect
// (DialectPostgres, DialectMySQL or DialectSQLite) and its processed_at index, each only if
// it does not exist. It validates table with ValidateTableName.
func SchemaStatements(dialect, table string) ([]string, error) {
	ddl, ok := createTableSQL[dialect]
	if !ok {
		return nil, fmt.Errorf("inbox: unknown SQL dialect %q", dialect)
	}
	quoted, err := QuoteTableName(dialect, table)
	if err != nil {
		return nil, err
	}
	statements := []string{fmt.Sprintf(ddl, quoted)}
	if index, ok := createIndexSQL[dialect]; ok {
		schema, name, qualified := strings.Cut(table, ".")
		if !qualified {
			schema, name = "", table
		}
		indexName := name + "_processed_at"
		if len(indexName) > maxIdentifierLength {
			indexName = indexName[:maxIdentifierLength]
		}
		qualifiedIndex := `"` + indexName + `"`
		if qualified {
			qualifiedIndex = `"` + schema + `".` + qualifiedIndex
		}
		statements = append(statements, fmt.Sprintf(index, quoted, `"`+indexName+`"`, qualifiedIndex, `"`+name+`"`))
	}
	return statements, nil
}

// CreateTableSQL returns SchemaStatements as one script, each statement ended by ";".
func CreateTableSQL(dialect, table string) (string, error) {
	statements, err := SchemaStatements(dialect, table)
	if err != nil {
		return "", err
	}
	return strings.Join(statements, ";\n") + ";\n", nil
}

// ValidateTableName accepts a table name made of ASCII letters, digits and underscores, not
// starting with a digit, at most 63 bytes, optionally qualified by a schema of the same form
// ("inbox", "billing.inbox"). Anything else returns ErrInvalidTableName: the name is the one
// thing the inbox puts into SQL text, so it must not be able to carry SQL.
func ValidateTableName(table string) error {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w %q: at most one dot, between schema and table", ErrInvalidTableName, table)
	}
	for _, part := range parts {
		if !isIdentifier(part) {
			return fmt.Errorf("%w %q: use 1 to %d letters, digits or underscores, not starting with a digit",
				ErrInvalidTableName, table, maxIdentifierLength)
		}
	}
	return nil
}

// QuoteTableName validates table and quotes each part for dialect, so that reserved words
// work and case is kept as written.
func QuoteTableName(dialect, table string) (string, error) {
	if err := ValidateTableName(table); err != nil {
		return "", err
	}
	quote := `"`
	if dialect == DialectMySQL {
		quote = "`"
	}
	parts := strings.Split(table, ".")
	for i, part := range parts {
		parts[i] = quote + part + quote
	}
	return strings.Join(parts, "."), nil
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

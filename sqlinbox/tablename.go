package sqlinbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTableName is wrapped by the error of every constructor, [SchemaSQL] and
// [MigrationFiles] for a table name that could carry SQL (see [ValidateTableName]), and by a
// [Dialect]'s ParseTable for one its database cannot hold.
var ErrInvalidTableName = errors.New("sqlinbox: invalid table name")

// errNoDialect is the error for a nil [Dialect].
var errNoDialect = errors.New("sqlinbox: no dialect: use sqlinbox.Postgres{}, sqlinbox.MySQL{} or sqlinbox.SQLite{}")

// maxIdentifierLength is PostgreSQL's limit ([MySQL] allows 64, [SQLite] more).
const maxIdentifierLength = 63

// ValidateTableName accepts a table name made of ASCII letters, digits and underscores, not
// starting with a digit, at most 63 bytes, optionally qualified by a schema of the same form
// ("inbox", "billing.inbox"). Anything else returns an error wrapping [ErrInvalidTableName]:
// the name is the one thing the inbox puts into SQL text, so it must not be able to carry
// SQL.
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

// parseQualified validates table with [ValidateTableName] and quotes each part with quote.
func parseQualified(table string, quote func(identifier string) string) (Table, error) {
	if err := ValidateTableName(table); err != nil {
		return Table{}, err
	}
	t := Table{Name: table}
	quoted := ""
	if schema, name, ok := strings.Cut(table, "."); ok {
		t.Schema, t.Name = schema, name
		quoted = quote(schema) + "."
	}
	t.Quoted = quoted + quote(t.Name)
	return t, nil
}

// indexName is the name of the processed_at index of a table called name: name_processed_at
// where that fits PostgreSQL's identifier limit. A longer one keeps the name's first bytes and
// adds a hash of the whole name: cut to the limit, it could be the table's own name (a name
// of 63 bytes), and PostgreSQL's CREATE INDEX IF NOT EXISTS would then find the table and
// create nothing; or two long names' indexes could be one.
func indexName(name string) string { return indexNamed(name, "_processed_at") }

// unpublishedIndexName is the name of the index of a table called name that finds its
// unpublished records, made as indexName makes the processed_at index's.
func unpublishedIndexName(name string) string { return indexNamed(name, "_unpublished") }

func indexNamed(name, suffix string) string {
	if len(name)+len(suffix) <= maxIdentifierLength {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	tag := hex.EncodeToString(sum[:4])
	return name[:maxIdentifierLength-len(suffix)-len(tag)-1] + "_" + tag + suffix
}

// label is the table's name as metrics give it in their attribute "table": schema.name, or
// the name alone, unquoted.
func (t Table) label() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

package sqlinbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The table is the guard: a claim is an insert that only the primary key (consumer,
// message_id) turns into a duplicate, and only if both columns compare bytes exactly. A
// table made by a migration tool can look right and still not guard: no primary key (every
// copy of a message is claimed), a primary key with a third column (the same), a
// case-insensitive message_id ("order-a" skipped as a copy of "Order-A"), a primary key on
// message_id alone (a second consumer's copy fails forever). The stores read the table's
// shape from the database's catalog and refuse such a table before any message is processed.

// ErrTableMismatch is wrapped by the error of every claim of a store whose inbox table cannot
// guard against duplicates (PgxStore and SQLStore: Claim and ClaimAndCommit), of their
// InitializeSchema when the table it found is such a table, and of their CheckTable. The
// message says which table, what is wrong and what is wanted. Nothing is claimed or
// committed and, in claim-first mode, the handler does not run: the message is nacked. A
// missing table is reported with it too.
var ErrTableMismatch = errors.New("sqlinbox: the inbox table cannot guard against duplicates")

// TableCheck is how a dialect reads an inbox table's shape from the database's catalog, for
// the check every store runs before its first claim (see PgxStore.CheckTable).
type TableCheck struct {
	// Describe returns the query, sent as it is, and its parameters, that describe table: one row per
	// column, in the order of TableColumn's fields (name text, type text, key position,
	// then the integers 0 or 1 for Exact, Binary, Temporal, Nullable and HasDefault, then
	// the primary key's name, "" if there is none). No row: the table does not exist.
	// Required.
	Describe func(table Table) (query string, args []any)

	// KeyType, BytesType and TimeType name, for error messages, the types this dialect
	// accepts for the key columns, for payload_hash and produced, and for processed_at
	// (`varchar or text COLLATE "C", or bytea`).
	KeyType, BytesType, TimeType string
}

// TableColumn is one column of the inbox table as TableCheck.Describe reports it.
type TableColumn struct {
	// Name is the column's name; Type its type as the catalog writes it, with its
	// collation if that is not the type's default (for messages).
	Name, Type string
	// KeyPosition is the column's position in the primary key, from 1; 0 if it is not in it.
	KeyPosition int64
	// Exact: a string or binary type whose values compare, and are unique, byte for byte
	// (no case folding, no trailing-space padding, no prefix index).
	Exact bool
	// Binary: the column holds any bytes as they are.
	Binary bool
	// Temporal: the column holds the time of the claim, as the dialect's Cleanup compares it.
	Temporal bool
	// Nullable: the column accepts NULL; HasDefault: an insert that omits it gets a value
	// (a default, a generated or identity column).
	Nullable, HasDefault bool
	// PrimaryKey is the name of the table's primary key ("" if none), the same on every row.
	PrimaryKey string
}

// The columns the inbox writes and reads, in the order the default schema creates them.
var (
	keyColumns   = []string{"consumer", "message_id"}
	inboxColumns = []string{"consumer", "message_id", "processed_at", "payload_hash", "produced"}
)

// judgeTable returns nil if columns, as dialect's TableCheck described table, describe a
// table that guards against duplicates, else an error wrapping ErrTableMismatch with every
// reason.
func judgeTable(dialect Dialect, table Table, columns []TableColumn) error {
	check := dialect.TableCheck
	if len(columns) == 0 {
		return tableMismatch(table, []string{"it does not exist; write its migration with " + migrationCommand(dialect, table) +
			" (-format golang-migrate or sql for those tools) and apply it with your migration tool, " +
			"or create it with InitializeSchema or \"watermill-inbox migrate\""})
	}
	byName := map[string]TableColumn{}
	var key []TableColumn
	for _, c := range columns {
		byName[c.Name] = c
		if c.KeyPosition > 0 {
			key = append(key, c)
		}
	}
	slices.SortFunc(key, func(a, b TableColumn) int { return int(a.KeyPosition - b.KeyPosition) })

	var problems []string
	var missing []string
	for _, name := range inboxColumns {
		if _, ok := byName[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("it has no column %s; want all of %s, which the table the migration of %s creates has",
			strings.Join(missing, ", "), strings.Join(inboxColumns, ", "), migrationCommand(dialect, table)))
	}

	keyNames := make([]string, len(key))
	for i, c := range key {
		keyNames[i] = c.Name
	}
	switch {
	case len(key) == 0:
		problems = append(problems, "it has no primary key (a UNIQUE constraint or index is not one); want (consumer, message_id)")
	case !sameSet(keyNames, keyColumns):
		problems = append(problems, fmt.Sprintf("its primary key is (%s); want (consumer, message_id)", strings.Join(keyNames, ", ")))
	}

	for _, name := range inboxColumns {
		c, ok := byName[name]
		if !ok {
			continue
		}
		switch {
		case (name == "consumer" || name == "message_id") && !c.Exact:
			problems = append(problems, fmt.Sprintf("column %s is %s, which does not compare bytes exactly (two keys differing in case or trailing spaces would be one); want %s",
				name, c.Type, check.KeyType))
		case (name == "payload_hash" || name == "produced") && !c.Binary:
			problems = append(problems, fmt.Sprintf("column %s is %s, which does not hold bytes as they are; want %s", name, c.Type, check.BytesType))
		case name == "processed_at" && !c.Temporal:
			problems = append(problems, fmt.Sprintf("column processed_at is %s, which retention cannot compare with a time; want %s", c.Type, check.TimeType))
		case name == "processed_at" && !c.HasDefault:
			problems = append(problems, fmt.Sprintf("column processed_at has no default, so claims would not record their time; want %s with the default of \"watermill-inbox schema\"", check.TimeType))
		}
	}
	for _, c := range columns {
		if !slices.Contains(inboxColumns, c.Name) && !c.Nullable && !c.HasDefault {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, so every claim would fail; want it nullable or with a default", c.Name))
		}
	}
	if len(problems) > 0 {
		return tableMismatch(table, problems)
	}
	return nil
}

// migrationCommand is the command that writes the migration creating table in dialect,
// for the messages of a refused table; for a dialect the command does not know, the
// function that returns the files.
func migrationCommand(dialect Dialect, table Table) string {
	name := table.Name
	if table.Schema != "" {
		name = table.Schema + "." + name
	}
	switch dialect.Name {
	case "postgres", "mysql", "sqlite":
		return fmt.Sprintf(`"watermill-inbox schema -format goose -dialect %s -table %s -out DIR"`, dialect.Name, name)
	}
	return fmt.Sprintf("sqlinbox.MigrationFiles(dialect, %q, format, version)", name)
}

func tableMismatch(table Table, problems []string) error {
	return mismatchError("sqlinbox: table " + table.Quoted + " cannot guard against duplicates: " + strings.Join(problems, "; "))
}

// mismatchError is a refused table's message; it wraps ErrTableMismatch.
type mismatchError string

func (e mismatchError) Error() string { return string(e) }
func (e mismatchError) Unwrap() error { return ErrTableMismatch }

// sameSet reports whether a and b hold the same names, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The table is the guard: a claim is an insert that only the primary key (consumer,
// message_id) turns into a duplicate, and only if both columns compare bytes exactly. A
// table made by a migration tool can look right and still not guard: no primary key (every
// copy of a message is claimed), a primary key with a third column (the same), a
// case-insensitive message_id ("order-a" skipped as a copy of "Order-A"), a primary key on
// message_id alone (a second consumer's copy fails forever). The stores read the table's
// shape from the database's catalog and refuse such a table before any message is processed.

// ErrTableMismatch is wrapped by the error of every claim of a [Store] whose inbox table
// cannot guard against duplicates ([Store.Claim] and [Store.ClaimAndCommit]), of its
// InitializeSchema when the table it found is such a table, and of its CheckTable. The
// message says which table, what is wrong and what is wanted. Nothing is claimed or
// committed and, in claim-first mode, the handler does not run: the message is nacked. A
// missing table is reported with it too.
var ErrTableMismatch = errors.New("sqlinbox: the inbox table cannot guard against duplicates")

// column is one column of the inbox table as [Dialect.DescribeTable] reports it; see there.
type column struct {
	name, typ                                     string
	keyPosition                                   int64
	exact, binary, temporal, nullable, hasDefault bool
	primaryKey                                    string
}

// The columns the inbox writes and reads, in the order the default schema creates them.
var (
	keyColumns   = []string{"consumer", "message_id"}
	inboxColumns = []string{"consumer", "message_id", "processed_at", "payload_hash", "produced"}
)

// unpublishedColumn is the column of the marks (see [RelaySQL]), which a table made before
// it lacks: the store then keeps no marks and runs no relay.
const unpublishedColumn = "unpublished"

// judgeTable returns nil if columns, as the dialect's DescribeTable described table, describe a
// table that guards against duplicates, else an error wrapping [ErrTableMismatch] with every
// reason.
func judgeTable(dialect Dialect, table Table, columns []column) error {
	keyType, binaryType, timeType := dialect.ColumnTypes()
	if len(columns) == 0 {
		return missingTableError{tableMismatch(table, []string{"it does not exist; write its migration with " + migrationCommand(dialect, table) +
			" (-format golang-migrate or sql for those tools) and apply it with your migration tool, " +
			"or create it with InitializeSchema or \"watermill-inbox migrate\""})}
	}
	byName := map[string]column{}
	var key []column
	for _, c := range columns {
		byName[c.name] = c
		if c.keyPosition > 0 {
			key = append(key, c)
		}
	}
	slices.SortFunc(key, func(a, b column) int { return int(a.keyPosition - b.keyPosition) })

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
		keyNames[i] = catalogText(c.name)
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
		case (name == "consumer" || name == "message_id") && !c.exact:
			problems = append(problems, fmt.Sprintf("column %s is %s, which does not compare bytes exactly (two keys differing in case or trailing spaces would be one); want %s",
				name, catalogText(c.typ), keyType))
		case (name == "payload_hash" || name == "produced") && !c.binary:
			problems = append(problems, fmt.Sprintf("column %s is %s, which does not hold bytes as they are; want %s", name, catalogText(c.typ), binaryType))
		case name == "processed_at" && !c.temporal:
			problem := fmt.Sprintf("column processed_at is %s, which does not hold the time of the claim as retention compares it; want %s", catalogText(c.typ), timeType)
			if upgrade, _, _ := dialect.UpgradeTable(table); upgrade != "" {
				problem += "; a table made by an earlier release is brought up to date by the migration of " + upgradeCommand(dialect, table)
			}
			problems = append(problems, problem)
		case name == "processed_at" && !c.hasDefault:
			problems = append(problems, fmt.Sprintf("column processed_at has no default, so claims would not record their time; want %s with the default of \"watermill-inbox schema\"", timeType))
		}
	}
	if c, ok := byName[unpublishedColumn]; ok && (c.nullable || !c.hasDefault) {
		problems = append(problems, "column unpublished is nullable or has no default, so a claim would not say whether its "+
			"record has left; want it NOT NULL with the default false, as \"watermill-inbox schema\" makes it")
	}
	for _, c := range columns {
		if !slices.Contains(inboxColumns, c.name) && !c.nullable && !c.hasDefault {
			problems = append(problems, fmt.Sprintf("column %s is NOT NULL without a default, so every claim would fail; want it nullable or with a default", catalogText(c.name)))
		}
	}
	if len(problems) > 0 {
		return tableMismatch(table, problems)
	}
	return nil
}

// migrationCommand is the command that writes the migration creating table in dialect, for
// the messages of a refused table. It names the dialect as the command does: a dialect of
// one's own is known to a build of the command that passes it to package inboxcli's Main.
func migrationCommand(dialect Dialect, table Table) string {
	name := table.Name
	if table.Schema != "" {
		name = table.Schema + "." + name
	}
	return fmt.Sprintf(`"watermill-inbox schema -format goose -dialect %s -table %s -out DIR"`, dialect.Name(), name)
}

// upgradeCommand is the command that writes the migration upgrading table ([UpgradeFiles]).
func upgradeCommand(dialect Dialect, table Table) string {
	return strings.Replace(migrationCommand(dialect, table), "schema ", "schema -upgrade ", 1)
}

func tableMismatch(table Table, problems []string) error {
	return mismatchError("sqlinbox: table " + table.Quoted + " cannot guard against duplicates: " + strings.Join(problems, "; "))
}

// catalogText returns a name or type the catalog gave, quoted as a Go string when it is not
// valid UTF-8 or holds a control character: anyone who can create a column names it, and a
// refusal's message reaches log lines and terminals (ESC and BEL would drive them).
func catalogText(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// mismatchError is a refused table's message; it wraps [ErrTableMismatch].
type mismatchError string

func (e mismatchError) Error() string { return string(e) }
func (e mismatchError) Unwrap() error { return ErrTableMismatch }

// sameSet reports whether a and b hold the same names, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

// isTableMismatch reports whether err is a table check's refusal.
func isTableMismatch(err error) bool { return errors.Is(err, ErrTableMismatch) }

// missingTableError is the table check's refusal of a table that does not exist, which
// InitializeSchema tells from a table of the wrong shape: when its CREATE failed, the CREATE's
// error says why the table is missing.
type missingTableError struct{ error }

func (e missingTableError) Unwrap() error { return e.error }

// CheckTable reads the inbox table's shape from the database's catalog and returns an error
// wrapping [ErrTableMismatch] if it cannot guard against duplicates, another error if the
// catalog could not be read, nil if the table is fit. The store runs it before its first
// claim; call it at start-up too, so that a service on a table that cannot guard refuses to
// start, and from a readiness probe. Its verdict is the store's: a refused table is refused
// by every claim until a check passes (at most every 5 s while messages arrive), a table
// that passes is used at once.
//
// On a store made by [NewMultiStatement] it also checks that the driver runs multi-statement
// requests and that the server is not one that breaks them, and returns the error wrapping
// [ErrMultiStatementRefused] that every message would get; that verdict is kept for the
// store's life.
func (s *Store) CheckTable(ctx context.Context) error {
	if err := s.table.check(ctx, s.table.passing(s.describe)); err != nil {
		return err
	}
	if s.refusal != nil {
		return s.refuse(ctx, "every mode")
	}
	return nil
}

// describe reads the table's shape in a transaction of its own, judges it and returns what the
// statements need of it. The transaction keeps the catalog query on one server connection
// behind a pooler in transaction mode, where a statement sent in steps (pgx's describe-exec
// mode) could otherwise have its steps run on two.
func (s *Store) describe(ctx context.Context) (shape tableShape, err error) {
	var columns []column
	var charsetErr error
	err = s.pool.inTx(ctx, false, func(q querier) error {
		// A connection of the pool in an unsafe character set, which the DSN gives every
		// connection, is refused before anything else (see charsetguard.go).
		if charsetErr = s.checkCharset(ctx, q); charsetErr != nil {
			return nil
		}
		rows, err := q.query(ctx, s.sql.describe, s.sql.describeArgs...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c column
			var exact, binary, temporal, nullable, hasDefault int64
			if err := rows.Scan(&c.name, &c.typ, &c.keyPosition, &exact, &binary, &temporal, &nullable, &hasDefault, &c.primaryKey); err != nil {
				return err
			}
			c.exact, c.binary, c.temporal, c.nullable, c.hasDefault = exact == 1, binary == 1, temporal == 1, nullable == 1, hasDefault == 1
			columns = append(columns, c)
		}
		return rows.Err()
	})
	if charsetErr != nil {
		return tableShape{}, charsetErr
	}
	if err != nil {
		return tableShape{}, fmt.Errorf("sqlinbox: read the inbox table's shape: %w", err)
	}
	if err := judgeTable(s.sql.dialect, s.sql.table, columns); err != nil {
		return tableShape{}, err
	}
	shape.primaryKey = columns[0].primaryKey
	shape.unpublished = s.sql.relay != nil && slices.ContainsFunc(columns, func(c column) bool { return c.name == unpublishedColumn })
	return shape, nil
}

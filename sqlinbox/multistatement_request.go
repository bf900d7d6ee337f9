package sqlinbox

import (
	"database/sql/driver"
	"fmt"
	"strings"
)

// A multi-statement request: how the store joins its statements into one text, and how it
// tells from the driver's result that the server ran every one of them, COMMIT the last.

// requestSeparator ends each statement of a request with a newline before the semicolon, so
// that a line comment at the end of one (-- or #) ends before the semicolon and cannot take
// in the next statement (after ";\n" it would take in the semicolon itself). pgx joins a
// simple-protocol batch the same way. A comment or string left open runs on to the end of
// the request: the connection counts the statements the server ran (checkResults).
const requestSeparator = "\n;"

// request joins begin (if not ""), statements and commit (if not "") into one multi-statement
// request, and the statements' arguments.
func request(begin string, statements []statement, commit string) (string, []any) {
	var b strings.Builder
	var args []any
	add := func(text string) {
		if b.Len() > 0 {
			b.WriteString(requestSeparator)
		}
		b.WriteString(text)
	}
	if begin != "" {
		add(begin)
	}
	for _, st := range statements {
		add(trimStatement(st.sql))
		args = append(args, st.args...)
	}
	if commit != "" {
		add(commit)
	}
	return b.String(), args
}

// trimStatement drops a trailing ";", which would add an empty statement to a multi-statement
// request, and the database refuses one.
func trimStatement(statement string) string { return strings.TrimRight(statement, "; \t\r\n") }

// endsInCommit is the argument the store adds to an adopted transaction's last request, which
// holds statements statements: the connection sends the request with COMMIT after it, and
// the transaction's Commit then sends nothing. NamedValueChecker's documentation provides for
// such arguments (special options to the query); the connection removes it before the driver
// sees the arguments.
type endsInCommit struct{ statements int }

// holdsStatements is the argument the store adds to a request that begins and ends a
// transaction of its own (write-behind mode's), which holds statements statements, COMMIT
// the last; the connection removes it, as endsInCommit.
type holdsStatements struct{ statements int }

// allResults is the result of a multi-statement request in go-sql-driver/mysql (its
// mysql.Result, since v1.8): one affected-row count for each statement the server ran.
type allResults interface{ AllRowsAffected() []int64 }

// checkResults returns an error unless the server ran exactly want statements of a request.
// A request whose text runs on past a statement's end (an unterminated /* comment, which
// MariaDB takes to the end of the request without an error) runs fewer statements than it
// holds, and its COMMIT is not among them: the transaction is still open, and the message
// must not count as committed. A statement that is several, or a procedure that returns
// results, makes more, and which of them was COMMIT is then unknown.
func checkResults(result driver.Result, want int) error {
	all, ok := result.(allResults)
	if !ok {
		return fmt.Errorf("sqlinbox: the driver's result %T does not say how many statements of a multi-statement "+
			"request ran (go-sql-driver/mysql's does since v1.8), so a request whose COMMIT did not run cannot be told "+
			"from one that committed", result)
	}
	switch got := len(all.AllRowsAffected()); {
	case got < want:
		return &statementCountError{fmt.Errorf("sqlinbox: the server ran %d of the request's %d statements, without an error, and not its "+
			"COMMIT: a statement ends in an unterminated comment (/* ...) or other text that took in the statements "+
			"after it; nothing is committed, the transaction is rolled back", got, want)}
	case got > want:
		return &statementCountError{fmt.Errorf("sqlinbox: the server ran %d statements for the request's %d: a queued statement holds "+
			"several statements, or calls a procedure that returns results, and whether the COMMIT ran cannot be "+
			"told; queue one statement per inbox.ExecAtCommit", got, want)}
	}
	return nil
}

// statementCountError is checkResults' error: the server ran more or fewer statements than the
// request holds, without an error of its own.
type statementCountError struct{ error }

func (e *statementCountError) Unwrap() error { return e.error }

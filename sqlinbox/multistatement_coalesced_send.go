package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/inboxkit/watermill-inbox/internal/txmark"
)

// One coalesced request on one connection: each message's transaction, from START TRANSACTION
// to COMMIT, followed by SET @sqlinbox_done = its position. The server runs them in order and
// stops at the first statement that fails, leaving that message's transaction open (MariaDB's
// behaviour: integration's TestMultiStatementTextStopsAtTheFailingStatement); the ROLLBACK
// that ends it reads @sqlinbox_done in the same request, which says how many committed.

// coalescedBytes bounds a coalesced request's text: explainSizeFrom, which the store takes
// every server's max_allowed_packet to admit.
const coalescedBytes = explainSizeFrom

// doneVariable is the user variable a coalesced request sets after each message's COMMIT.
const doneVariable = "@sqlinbox_done"

// send sends requests on conn, as many at a time as coalesce allows, and sets each one's
// result.
func (p *coalescedPool) send(ctx context.Context, conn *sql.Conn, requests []*pipelineRequest) {
	for len(requests) > 0 {
		var ok bool
		n := coalesce(requests)
		if n == 1 {
			ok = p.sendAlone(ctx, conn, requests[0])
		} else {
			n, ok = p.sendTogether(ctx, conn, requests[:n])
		}
		if !ok {
			for _, r := range requests[n:] {
				r.failed, r.err = failedSetup, &storeError{errors.New("sqlinbox: the connection broke before the message was sent")}
			}
			return
		}
		requests = requests[n:]
	}
}

// coalesce returns how many of requests, from the first, go in the next request: those up to
// the first that must go alone, within coalescedBytes; 1 if the first must go alone.
func coalesce(requests []*pipelineRequest) int {
	size := int64(0)
	for n, r := range requests {
		size += requestSize(r.statements)
		if !coalescable(r.statements) || size > coalescedBytes {
			return max(n, 1)
		}
	}
	return len(requests)
}

// sendAlone sends r as [NewMultiStatement]'s write-behind mode does, with the count of the
// statements the server ran, and rolls back a transaction its failure left open. It returns
// false if the connection broke.
func (p *coalescedPool) sendAlone(ctx context.Context, conn *sql.Conn, r *pipelineRequest) bool {
	p.perPipeline.Record(ctx, 1, p.tableAttr)
	text, args := request(p.beginText, r.statements, sqlCommit)
	_, err := conn.ExecContext(txmark.With(ctx, txmark.Begins|txmark.Ends), text, append(args, holdsStatements{len(r.statements) + 2})...)
	r.failed, r.err = 0, nil
	if err == nil {
		return true
	}
	r.failed, r.err = failedUnknown, err
	if connectionLost(err) || ctx.Err() != nil {
		discard(conn)
		r.err = lostPipeline(err)
		return false
	}
	if _, rbErr := conn.ExecContext(txmark.With(ctx, txmark.Ends), sqlRollback); rbErr != nil {
		discard(conn)
		r.err = lostPipeline(errors.Join(err, rbErr))
		return false
	}
	return true
}

// sendTogether sends batch as one request and sets the result of the messages it settled: those
// that committed and the one that failed. It returns how many it settled, and false if the
// connection broke (all of batch is then settled).
func (p *coalescedPool) sendTogether(ctx context.Context, conn *sql.Conn, batch []*pipelineRequest) (int, bool) {
	p.perPipeline.Record(ctx, int64(len(batch)), p.tableAttr)
	var text strings.Builder
	var args []any
	statements := 1
	text.WriteString("SET " + doneVariable + " = 0")
	for k, r := range batch {
		t, a := request(p.beginText, r.statements, sqlCommit)
		text.WriteString(requestSeparator + t + requestSeparator + "SET " + doneVariable + " = " + strconv.Itoa(k+1))
		args = append(args, a...)
		statements += len(r.statements) + 3
	}
	_, err := conn.ExecContext(txmark.With(ctx, txmark.Begins|txmark.Ends), text.String(), append(args, holdsStatements{statements})...)
	if err == nil {
		for _, r := range batch {
			r.failed, r.err = 0, nil
		}
		return len(batch), true
	}
	var counted *statementCountError
	_, _, serverErr := mysqlError(err)
	switch {
	case connectionLost(err) || ctx.Err() != nil:
		// The driver closes a connection whose context ended mid-request.
		discard(conn)
		for _, r := range batch {
			r.failed, r.err = failedUnknown, lostPipeline(err)
		}
		return len(batch), false
	case !serverErr && !errors.As(err, &counted):
		// The driver sent nothing (it would not write a message's arguments into the text):
		// each alone finds out which.
		for i, r := range batch {
			if !p.sendAlone(ctx, conn, r) {
				return i + 1, false
			}
		}
		return len(batch), true
	}
	var done sql.NullInt64
	if rbErr := conn.QueryRowContext(txmark.With(ctx, txmark.Ends), sqlRollback+requestSeparator+"SELECT "+doneVariable).Scan(&done); rbErr != nil {
		discard(conn)
		for _, r := range batch {
			r.failed, r.err = failedUnknown, lostPipeline(errors.Join(err, rbErr))
		}
		return len(batch), false
	}
	committed := int(done.Int64)
	if committed < 0 || committed >= len(batch) {
		// Every COMMIT ran, but not the statements the request holds (a count error): whether
		// each message ran as written cannot be told. Each is nacked; its redelivery finds its
		// claim committed or not.
		for _, r := range batch {
			r.failed, r.err = failedUnknown, fmt.Errorf("sqlinbox: coalesced request: %w", err)
		}
		return len(batch), true
	}
	for _, r := range batch[:committed] {
		r.failed, r.err = 0, nil
	}
	batch[committed].failed, batch[committed].err = failedUnknown, err
	return committed + 1, true
}

// coalescable reports whether statements may go in a coalesced request: each queued one is one
// statement however the server reads it, and holds a "?" for each argument and no other.
func coalescable(statements []statement) bool {
	for _, st := range statements {
		if st.kind == kindQueued && (!oneStatement(st.sql) || strings.Count(st.sql, "?") != len(st.args)) {
			return false
		}
	}
	return true
}

// oneStatement reports whether text is one statement to [MySQL] whatever its sql_mode: it holds
// no ";", no executable comment and no control byte but tab, newline and carriage return (after
// which the server may or may not read "--" as a comment), and ends outside any quote or /* comment read with and
// without backslash escapes (NO_BACKSLASH_ESCAPES). In a request that stops at an error the
// server's count of the statements it ran is lost, so the store must know this before it sends.
func oneStatement(text string) bool {
	text = trimStatement(text)
	if strings.ContainsRune(text, ';') || strings.Contains(text, "/*!") || strings.Contains(text, "/*M!") ||
		strings.ContainsFunc(text, unusualControl) {
		return false
	}
	return closedAtEnd(text, true) && closedAtEnd(text, false)
}

// closedAtEnd reports whether text ends outside any quote and /* comment, backslash saying
// whether a backslash escapes the byte after it in '...' and "...". A line comment ends at the
// newline that requestSeparator puts after it.
func closedAtEnd(text string, backslash bool) bool {
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := closingQuote(text, i, backslash && c != '`')
			if end < 0 {
				return false
			}
			i = end
		case strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return false
			}
			i += 2 + end + 2
		case c == '#' || strings.HasPrefix(text[i:], "--") && (len(text) == i+2 || strings.IndexByte(" \t\r\n", text[i+2]) >= 0):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				return true
			}
			i += end + 1
		default:
			i++
		}
	}
	return true
}

// closingQuote returns the index after the quote that opens at i, or -1 if it is open at the
// end of text.
func closingQuote(text string, i int, backslash bool) int {
	quote := text[i]
	for j := i + 1; j < len(text); j++ {
		switch {
		case backslash && text[j] == '\\':
			j++
		case text[j] == quote && j+1 < len(text) && text[j+1] == quote:
			j++
		case text[j] == quote:
			return j + 1
		}
	}
	return -1
}

// unusualControl reports control characters other than tab, newline and carriage return.
func unusualControl(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f }

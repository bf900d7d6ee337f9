package sqlinbox

import (
	"fmt"
	"strings"

	inbox "github.com/inboxkit/watermill-inbox"
)

// The inbox transaction is the middleware's: a statement of the handler's that ends it
// (ROLLBACK, COMMIT, START TRANSACTION, MySQL's implicit commits) would leave the claim rolled
// back or committed early, and every statement after it in autocommit. The store reads the text
// of what it is about to send for the handler (a queued statement, a pgx handler's statement
// on its pgx.Tx) and refuses such a statement before anything of it is sent, with an error
// wrapping [inbox.ErrTxEndedByHandler]: the transaction rolls back and the message is nacked.
// What the store does not send (a database/sql handler's own statements on its *sql.Tx) is
// found at the commit instead (see the dialects' commit checks).

// commitGuard is what a dialect gives a store whose handlers write through a [*sql.Tx], which
// the store cannot watch ([NewDB], [NewMultiStatement]): a statement that marks the claim's
// transaction right after the claim (mark, "" for none), and one that the store sends before
// COMMIT (check), which fails, or returns no row (returnsRow, taking the claim's consumer and
// key), unless the transaction is still the one the claim began. A handler's own ROLLBACK,
// COMMIT or implicit commit on the *sql.Tx is then a failure at the commit, with an error
// wrapping [inbox.ErrTxEndedByHandler], not an ack. The store asks for it with a type
// assertion, so it is not part of [Dialect].
type commitGuard interface {
	commitCheck(t Table) (mark, check string, returnsRow bool)
	// checkFailed reports whether err, from check, says the transaction is not the claim's.
	checkFailed(err error) bool
}

// claimSavepoint is the savepoint that marks the claim's transaction where the check is that
// it still exists: a transaction's end, whatever ended it, drops its savepoints.
const claimSavepoint = "sqlinbox_claim"

// txGuard is what a dialect whose statements the store reads tells it; the store asks for it
// with a type assertion, so it is not part of [Dialect]. A dialect of one's own that embeds a
// shipped one by value has it promoted.
type txGuard interface {
	// lexicon is how the database reads a statement's text.
	lexicon() sqlLexicon
	// endsTransaction names what st does to the transaction it runs in, if it ends it,
	// commits it or begins another ("ROLLBACK", "an implicit commit (CREATE TABLE)"), or "".
	endsTransaction(st sqlStatement) string
}

// refuseTxEnd returns the refusal of text if one of its statements ends the transaction, or nil.
func refuseTxEnd(guard txGuard, text string) error {
	for _, st := range guard.lexicon().statements(text) {
		if what := guard.endsTransaction(st); what != "" {
			return fmt.Errorf("refused: %s ends the inbox transaction, which the middleware commits or rolls back "+
				"after the handler; nothing of it was sent: %w", what, inbox.ErrTxEndedByHandler)
		}
	}
	return nil
}

// sqlStatement is one statement of a text, as far as a guard reads it.
type sqlStatement struct {
	// words are its first words (up to three), lower-cased, after any leading comments (an
	// executable comment's text, MySQL's /*! ... */, is the statement's).
	words []string
	// text is the whole statement, lower-cased, without its ending ";".
	text string
}

// word returns the statement's i-th word, or "".
func (s sqlStatement) word(i int) string {
	if i < len(s.words) {
		return s.words[i]
	}
	return ""
}

// sqlLexicon says how a database reads the text of statements, as far as telling where each
// one begins and ends: its quotes and comments.
type sqlLexicon struct {
	// mysql: # comments, -- only before white space, `quoted` names, backslash escapes in
	// '...' and "...", /*! executable comments */.
	mysql bool
	// postgres: $tag$ quotes, nested /* */ comments, backslash escapes in E'...'.
	postgres bool
	// sqlite: [quoted] names.
	sqlite bool
}

// statements splits text into its statements at each ";" outside quotes and comments. A
// quote or comment left open runs to the end of the text, as the server reads it.
func (l sqlLexicon) statements(text string) []sqlStatement {
	var out []sqlStatement
	for start := 0; start < len(text); {
		end := l.statementEnd(text, start)
		st := sqlStatement{text: strings.ToLower(text[start:end]), words: l.firstWords(text[start:end])}
		if len(st.words) > 0 {
			out = append(out, st)
		}
		start = end + 1
	}
	return out
}

// statementEnd returns the index of the ";" that ends the statement starting at start, or
// len(text).
func (l sqlLexicon) statementEnd(text string, start int) int {
	for i := start; i < len(text); {
		if text[i] == ';' {
			return i
		}
		i = l.skip(text, i)
	}
	return len(text)
}

// skip returns the index after the token at i: a quoted string or name, a comment, or one byte.
func (l sqlLexicon) skip(text string, i int) int {
	c := text[i]
	switch {
	case c == '\'':
		backslash := l.mysql || l.postgres && i > 0 && (text[i-1] == 'e' || text[i-1] == 'E') &&
			(i == 1 || !isIdentifierByte(text[i-2]))
		return quoteEnd(text, i, '\'', backslash)
	case c == '"':
		return quoteEnd(text, i, '"', l.mysql)
	case c == '`' && (l.mysql || l.sqlite):
		return quoteEnd(text, i, '`', false)
	case c == '[' && l.sqlite:
		if end := strings.IndexByte(text[i+1:], ']'); end >= 0 {
			return i + 1 + end + 1
		}
		return len(text)
	case c == '$' && l.postgres:
		return dollarQuoteEnd(text, i)
	}
	if end, ok := l.commentEnd(text, i); ok {
		return end
	}
	return i + 1
}

// commentEnd returns the index after the comment at i, if one starts there. An executable
// comment's opening (MySQL's /*!, MariaDB's /*M!, with a version) is skipped alone: its text
// is code, and its closing */ is one byte the statement's.
func (l sqlLexicon) commentEnd(text string, i int) (int, bool) {
	rest := text[i:]
	switch {
	case l.mysql && (strings.HasPrefix(rest, "/*!") || strings.HasPrefix(rest, "/*M!")):
		j := i + strings.IndexByte(rest, '!') + 1
		for j < len(text) && text[j] >= '0' && text[j] <= '9' {
			j++
		}
		return j, true
	case strings.HasPrefix(rest, "/*"):
		depth, j := 1, i+2
		for j < len(text) && depth > 0 {
			switch {
			case strings.HasPrefix(text[j:], "*/"):
				depth, j = depth-1, j+2
			case l.postgres && strings.HasPrefix(text[j:], "/*"):
				depth, j = depth+1, j+2
			default:
				j++
			}
		}
		return j, true
	case l.mysql && strings.HasPrefix(rest, "#"),
		strings.HasPrefix(rest, "--") && (!l.mysql || len(rest) == 2 || strings.ContainsRune(" \t\r\n\f\v", rune(rest[2]))):
		if end := strings.IndexByte(rest, '\n'); end >= 0 {
			return i + end + 1, true
		}
		return len(text), true
	}
	return 0, false
}

// firstWords returns up to three leading words of statement, lower-cased, past white space
// and comments.
func (l sqlLexicon) firstWords(statement string) []string {
	var words []string
	for i := 0; i < len(statement) && len(words) < 3; {
		c := statement[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v' || c == '(':
			i++
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
			j := i
			for j < len(statement) && isIdentifierByte(statement[j]) {
				j++
			}
			words = append(words, strings.ToLower(statement[i:j]))
			i = j
		default:
			end, ok := l.commentEnd(statement, i)
			if !ok {
				return words
			}
			i = end
		}
	}
	return words
}

// quoteEnd returns the index after the quoted text that opens at i with quote (text[i]): a
// doubled quote is one character of it, and, with backslash, so is the byte after a
// backslash. A quote left open runs to the end of text.
func quoteEnd(text string, i int, quote byte, backslash bool) int {
	if end := closingQuote(text, i, backslash); end >= 0 && text[i] == quote {
		return end
	}
	return len(text)
}

// dollarQuoteEnd returns the index after PostgreSQL's $tag$...$tag$ that opens at i, or i+1
// for a "$" that opens none (a parameter, $1).
func dollarQuoteEnd(text string, i int) int {
	j := i + 1
	for j < len(text) && (text[j] == '_' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z' ||
		j > i+1 && text[j] >= '0' && text[j] <= '9' || text[j] >= 0x80) {
		j++
	}
	if j >= len(text) || text[j] != '$' {
		return i + 1
	}
	tag := text[i : j+1]
	if end := strings.Index(text[j+1:], tag); end >= 0 {
		return j + 1 + end + len(tag)
	}
	return len(text)
}

// endsTransactionStandard names the statements that end a transaction in standard SQL and its
// common spellings: COMMIT, ROLLBACK (not ROLLBACK TO a savepoint), BEGIN, START TRANSACTION
// and END, which every shipped database reads so.
func endsTransactionStandard(st sqlStatement) string {
	switch st.word(0) {
	case "commit", "end", "begin":
		return strings.ToUpper(st.word(0))
	case "start":
		if st.word(1) == "transaction" {
			return "START TRANSACTION"
		}
	case "rollback":
		if st.word(1) == "to" || (st.word(1) == "work" || st.word(1) == "transaction") && st.word(2) == "to" {
			return "" // to a savepoint: the transaction goes on
		}
		return "ROLLBACK"
	}
	return ""
}

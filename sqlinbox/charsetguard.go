package sqlinbox

import (
	"context"
	"fmt"
)

// The store's own values (consumer, key, fingerprint, record) reach [MySQL] hex-encoded (see
// Param), which no character set or sql_mode reads otherwise. The application's do not: with
// interpolateParams=true, which [NewMultiStatement] needs, go-sql-driver/mysql writes the
// parameters of the handler's statements and of the statements it queued into their text,
// escaped in a way a connection in GBK, SJIS, CP932 or BIG5 can undo. A dialect with a
// charsetGuard (MySQL's) makes the store refuse such a connection: at the table check
// (CheckTable, InitializeSchema, before the first claim), in every claim (the guard travels
// in the claim's statement, see the MySQL dialect's InsertClaim), and in a queued statement
// that would change how the server reads the statements after it.

// charsetGuard is what a dialect whose driver escapes on the client tells the store; the
// store asks for it with a type assertion, so it is not part of [Dialect]. A dialect of one's
// own that embeds [MySQL] by value has these methods promoted from it, and keeps every
// refusal: the guard inside the claim, the named refusal at the table check and that of a
// queued SET.
type charsetGuard interface {
	// charsetQuery reads the session's character_set_client.
	charsetQuery() string
	// unsafeCharset reports whether client-side escaping is unsafe in charset.
	unsafeCharset(charset string) bool
	// mayBeCharsetRefusal reports whether err may be the claim's guard refusing the session;
	// the store then reads the session's character set to tell.
	mayBeCharsetRefusal(err error) bool
	// sessionChange names what a queued statement changes of how the server reads the
	// statements after it (a SET of sql_mode or of the character set, a prepared statement
	// that may run one), or "".
	sessionChange(statement string) string
}

// charsetQueryer is a session that can read its connection's character set after the guard
// refused a claim, on the same connection.
type charsetQueryer interface {
	queryString(ctx context.Context, query string) (string, error)
}

// charsetError is the refusal of a connection whose character_set_client is unsafe: the
// deployment's, not the message's, so a store error, which IsTransient reports.
func charsetError(charset string, cause error) error {
	err := fmt.Errorf("sqlinbox: refused: the MySQL connection's character_set_client is %s, in which a multibyte "+
		"character can swallow the backslash that go-sql-driver/mysql escapes a quote with when it writes parameters "+
		"into the statement (interpolateParams=true, which NewMultiStatement needs), so that a value of the "+
		"application's could end its string and run as SQL; connect with charset=utf8mb4 and run no SET NAMES or "+
		"SET character_set_client on the pool (the tables' own character sets need not change)", charset)
	if cause != nil {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return &storeError{err}
}

// checkCharset reads the character set of a connection of the pool, for the table check: an
// error naming it if it is unsafe.
func (s *Store) checkCharset(ctx context.Context, q querier) error {
	guard, ok := s.sql.dialect.(charsetGuard)
	if !ok {
		return nil
	}
	rows, err := q.query(ctx, guard.charsetQuery())
	if err != nil {
		return fmt.Errorf("sqlinbox: read the connection's character set: %w", err)
	}
	defer rows.Close()
	var charset string
	if rows.Next() {
		if err := rows.Scan(&charset); err != nil {
			return fmt.Errorf("sqlinbox: read the connection's character set: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlinbox: read the connection's character set: %w", err)
	}
	if guard.unsafeCharset(charset) {
		return charsetError(charset, nil)
	}
	return nil
}

// explainClaim returns the refusal naming the session's character set if err is the claim's
// guard refusing it, else err. It reads the character set on the session's connection, only
// after a failure that may be the guard's.
func (s *Store) explainClaim(ctx context.Context, sess session, err error) error {
	guard, ok := s.sql.dialect.(charsetGuard)
	if !ok || !guard.mayBeCharsetRefusal(err) {
		return err
	}
	q, ok := sess.(charsetQueryer)
	if !ok {
		return err
	}
	charset, readErr := q.queryString(context.WithoutCancel(ctx), guard.charsetQuery())
	if readErr != nil || !guard.unsafeCharset(charset) {
		return err
	}
	return charsetError(charset, err)
}

// checkQueued refuses a queued statement that ends the inbox transaction (see txGuard), and
// one that changes how the server reads the statements after it: the driver escaped their
// parameters by the session as it was before. Each statement of a queued text is read, so that
// a text of several (a multi-statement request's) hides none.
func (s statements) checkQueued(queued []statement) error {
	tx, readsTx := s.dialect.(txGuard)
	charset, readsCharset := s.dialect.(charsetGuard)
	for i, st := range queued {
		if readsTx {
			if err := refuseTxEnd(tx, st.sql); err != nil {
				return fmt.Errorf("sqlinbox: queued statement %d: %w", i+1, err)
			}
		}
		if !readsCharset {
			continue
		}
		texts := []string{st.sql}
		if readsTx {
			texts = texts[:0]
			for _, part := range tx.lexicon().statements(st.sql) {
				texts = append(texts, part.text)
			}
		}
		for _, text := range texts {
			if changed := charset.sessionChange(text); changed != "" {
				return fmt.Errorf("sqlinbox: queued statement %d: refused: it can change the session's character set or "+
					"sql_mode (%s), and the driver escaped the parameters of the statements after it by the session as it was "+
					"before (interpolateParams=true), which a new character set or sql_mode can read otherwise; set them in "+
					"the DSN (charset=utf8mb4, sql_mode) or outside the inbox transaction", i+1, changed)
			}
		}
	}
	return nil
}

package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	inbox "github.com/inboxkit/watermill-inbox"
)

// claimInText is Claim on a store whose *sql.DB is opened on MySQLConnector, with
// Config.MultiStatements: START TRANSACTION, the lock timeout and the claim go as one text,
// and the transaction the handler gets is the one that text began. A duplicate costs one
// more text: ROLLBACK and the read of the committed claim.
func (s *SQLStore) claimInText(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	var text strings.Builder
	var args []any
	if s.sql.lockTimeout != "" {
		text.WriteString(s.sql.lockTimeout + "; ")
		args = append(args, s.sql.lockTimeoutArgs...)
	}
	text.WriteString(s.sql.insert)
	args = append(args, claim.Consumer, claim.Key, claim.Fingerprint)

	// The connection is the store's until the transaction ends: the claim's text runs on
	// it before database/sql's transaction exists.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: connection: %w", err)
	}
	var claimErr error
	err = conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*textConn)
		if !ok {
			return fmt.Errorf("sqlinbox: connection %T does not come from MySQLConnector", driverConn)
		}
		claimErr = c.beginWith(ctx, text.String(), args)
		if errors.Is(claimErr, driver.ErrBadConn) {
			return claimErr // database/sql closes the connection
		}
		return nil
	})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	if claimErr != nil {
		defer conn.Close()
		prior, err := s.afterFailedText(ctx, conn, claim, fmt.Errorf("sqlinbox: claim: %w", claimErr))
		return nil, prior, err
	}
	// The claim is in: from here on the middleware, not the message context, ends the
	// transaction (see detachedAfterClaim).
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		discard(conn)
		_ = conn.Close()
		return nil, nil, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	return &sqlTx{tx: tx, handle: tx, store: s, claim: claim, conn: conn}, nil, nil
}

// commitText commits a transaction that claimInText began: the queued statements and the
// record, if any, go with COMMIT as one text; without them COMMIT goes alone.
func (t *sqlTx) commitText(ctx context.Context, statements []queuedStatement) error {
	if len(statements) == 0 {
		return sqlEnded(t.tx.Commit())
	}
	var text strings.Builder
	var args []any
	for _, q := range statements {
		if text.Len() > 0 {
			text.WriteString("; ")
		}
		// A trailing ";" would add an empty statement, which the database refuses.
		text.WriteString(strings.TrimRight(q.sql, "; \t\r\n"))
		args = append(args, q.args...)
	}
	args = append(args, endsInCommit{})
	if _, err := t.tx.ExecContext(ctx, text.String(), args...); err != nil {
		// The text stops at the statement that failed: unless that was COMMIT, the
		// transaction is open, and ROLLBACK ends it (after a failed COMMIT it does nothing).
		err = sqlEnded(fmt.Errorf("sqlinbox: commit text: %w", err))
		if rbErr := t.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
		}
		return err
	}
	return sqlEnded(t.tx.Commit()) // sends nothing: the text committed
}

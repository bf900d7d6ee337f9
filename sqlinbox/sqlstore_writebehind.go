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

var _ inbox.WriteBehindStore = (*SQLStore)(nil)

// ClaimAndCommit implements inbox.WriteBehindStore. With Config.MultiStatements it sends
// the message as one text of several statements (see BatchSQL): one round trip. Without, it
// claims, runs the statements, records the produced messages and commits, as Claim and
// Commit do, each statement a round trip.
func (s *SQLStore) ClaimAndCommit(ctx context.Context, claim inbox.Claim, statements []inbox.Statement, produced []byte) (*inbox.Processed, error) {
	if err := s.guardTable(ctx); err != nil {
		return nil, err
	}
	if s.sql.batch == nil {
		tx, prior, err := s.Claim(ctx, claim)
		if err != nil || prior != nil {
			return prior, err
		}
		for _, st := range statements {
			tx.(*sqlTx).Queue(st.SQL, st.Args...)
		}
		return nil, tx.Commit(ctx, produced)
	}
	if err := s.refuseTexts(ctx, writeBehindTexts); err != nil {
		return nil, err
	}

	var text strings.Builder
	var args []any
	add := func(statement string, statementArgs ...any) {
		if text.Len() > 0 {
			text.WriteString("; ")
		}
		text.WriteString(statement)
		args = append(args, statementArgs...)
	}
	add(sqlBegin)
	if s.sql.lockTimeout != "" {
		add(s.sql.lockTimeout, s.sql.lockTimeoutArgs...)
	}
	add(s.sql.insert, claim.Consumer, claim.Key, claim.Fingerprint)
	for _, st := range statements {
		// A trailing ";" would add an empty statement, which the database refuses.
		add(strings.TrimRight(st.SQL, "; \t\r\n"), st.Args...)
	}
	if produced != nil {
		add(s.sql.record, produced, claim.Consumer, claim.Key)
	}
	add(sqlCommit)

	// One connection for the text and, after a failure, for the ROLLBACK and the reads.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, text.String(), args...); err != nil {
		return s.afterFailedText(ctx, conn, claim, fmt.Errorf("sqlinbox: write-behind batch: %w", err))
	}
	return nil, nil
}

// afterFailedText ends the transaction a failed text that began with START TRANSACTION
// (write-behind's, or claim-first's claim) left open, and tells a duplicate from every other
// failure.
func (s *SQLStore) afterFailedText(ctx context.Context, conn *sql.Conn, claim inbox.Claim, batchErr error) (*inbox.Processed, error) {
	ctx = context.WithoutCancel(ctx) // the transaction must end, whatever happens to ctx
	if !s.sql.isDuplicateKey(batchErr) {
		if err := rollback(ctx, conn); err != nil {
			return nil, errors.Join(batchErr, err)
		}
		if _, err := conn.ExecContext(ctx, s.sql.batch.Probe, 1, 1); err != nil {
			return nil, fmt.Errorf("%w (Config.MultiStatements needs a driver that runs several statements in one call, with the parameters in the text: go-sql-driver/mysql's multiStatements=true and interpolateParams=true)", batchErr)
		}
		return nil, batchErr
	}
	// The claim or a queued statement hit a primary key. Only a committed claim makes this
	// a duplicate (see BatchSQL): ROLLBACK and the read of the claim share a text.
	prior, err := s.rollbackAndReadPrior(ctx, conn, claim)
	if err != nil {
		return nil, errors.Join(batchErr, err)
	}
	return prior, nil
}

// rollbackAndReadPrior sends ROLLBACK and Prior in one text and reads Prior's row.
func (s *SQLStore) rollbackAndReadPrior(ctx context.Context, conn *sql.Conn, claim inbox.Claim) (*inbox.Processed, error) {
	rows, err := conn.QueryContext(ctx, sqlRollback+"; "+s.sql.prior, claim.Consumer, claim.Key)
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("sqlinbox: rollback: %w", err)
	}
	defer rows.Close()
	// go-sql-driver/mysql skips ROLLBACK's empty result; a driver that does not gives it first.
	for !rows.Next() {
		if !rows.NextResultSet() {
			return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", errors.Join(rows.Err(), sql.ErrNoRows))
		}
	}
	return scanPrior(rows)
}

// rollback ends the transaction on conn, or makes sure conn is never used again.
func rollback(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, sqlRollback); err != nil {
		discard(conn)
		return fmt.Errorf("sqlinbox: rollback: %w", err)
	}
	return nil
}

// discard closes conn's driver connection instead of returning it to the pool: it may still
// be in a transaction.
func discard(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

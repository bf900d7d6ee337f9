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

// ClaimAndCommit implements inbox.WriteBehindStore in one round trip: BEGIN, the lock
// timeout (if set), the claim, the statements, the record of produced messages and COMMIT as
// one multi-statement request (see MultiStatementSQL).
func (s *MultiStatementStore) ClaimAndCommit(ctx context.Context, claim inbox.Claim, statements []inbox.Statement, produced []byte) (*inbox.Processed, error) {
	if err := s.before(ctx, writeBehindMultiStatement); err != nil {
		return nil, err
	}
	sql := s.store.sql
	var request strings.Builder
	var args []any
	add := func(statement string, statementArgs ...any) {
		if request.Len() > 0 {
			request.WriteString("; ")
		}
		request.WriteString(statement)
		args = append(args, statementArgs...)
	}
	add(sqlBegin)
	if sql.lockTimeout != "" {
		add(sql.lockTimeout, sql.lockTimeoutArgs...)
	}
	add(sql.insert, claim.Consumer, claim.Key, claim.Fingerprint)
	for _, st := range statements {
		add(trimStatement(st.SQL), st.Args...)
	}
	if produced != nil {
		add(sql.record, produced, claim.Consumer, claim.Key)
	}
	add(sqlCommit)

	// One connection for the request and, after a failure, for the ROLLBACK and the reads.
	conn, err := s.store.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, request.String(), args...); err != nil {
		return s.afterFailedRequest(ctx, conn, claim, fmt.Errorf("sqlinbox: write-behind request: %w", err))
	}
	return nil, nil
}

// afterFailedRequest ends the transaction that a failed request beginning with START
// TRANSACTION (write-behind's, or claim-first's claim) left open, and tells a duplicate from
// every other failure.
func (s *MultiStatementStore) afterFailedRequest(ctx context.Context, conn *sql.Conn, claim inbox.Claim, requestErr error) (*inbox.Processed, error) {
	ctx = context.WithoutCancel(ctx) // the transaction must end, whatever happens to ctx
	if !s.store.guard.isDuplicateKey(s.store.sql, requestErr) {
		if err := rollback(ctx, conn); err != nil {
			return nil, errors.Join(requestErr, err)
		}
		if _, err := conn.ExecContext(ctx, s.multi.Probe, 1, 1); err != nil {
			return nil, fmt.Errorf("%w (a MultiStatementStore needs a driver that runs several statements in one call, "+
				"with the parameters in the text: go-sql-driver/mysql's multiStatements=true and interpolateParams=true)", requestErr)
		}
		return nil, requestErr
	}
	// The claim or a queued statement hit a primary key. Only a committed claim makes this
	// a duplicate (see MultiStatementSQL): ROLLBACK and the read of the claim share a request.
	prior, err := s.rollbackAndReadPrior(ctx, conn, claim)
	if err != nil {
		return nil, errors.Join(requestErr, err)
	}
	return prior, nil
}

// rollbackAndReadPrior sends ROLLBACK and Prior as one request and reads Prior's row.
func (s *MultiStatementStore) rollbackAndReadPrior(ctx context.Context, conn *sql.Conn, claim inbox.Claim) (*inbox.Processed, error) {
	rows, err := conn.QueryContext(ctx, sqlRollback+"; "+s.store.sql.prior, claim.Consumer, claim.Key)
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

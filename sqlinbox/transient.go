package sqlinbox

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	inbox "github.com/inboxkit/watermill-inbox"
)

// IsTransient reports whether err, returned by the store, is a failure of its database rather
// than of the message, which a later delivery of the same message gets past:
//
//   - the table check's refusal (ErrTableMismatch, a missing table among them), a
//     multi-statement store refused on this driver or server (ErrMultiStatementRefused),
//     and a MySQL connection refused for its character set (see MySQL);
//   - a failure of the store's own statements before the handler's (BEGIN, the lock
//     timeout, the claim, the read of a committed claim), and a connection that could not
//     be acquired;
//   - the store's session lost: its connection refused, reset, closed or timed out while the
//     store's own statements ran, such as a COMMIT whose outcome is unknown (told by the
//     session, not by the error's type: a pgx connection that closed, a database/sql
//     ROLLBACK that failed after it, the COMMIT's own connection error);
//   - what the dialect reports (Dialect.IsTransient): deadlocks and serialization
//     failures, lock timeouts, a read-only or starting server, a Galera node not ready, by
//     the code the server raised them with.
//
// Everything else is the message's: a constraint that a queued statement or its COMMIT
// violates, say, an argument the driver cannot send, and a request too large for the server
// (an error wrapping [inbox.ErrRecordTooLarge]), even when the server reset the connection
// over it: every delivery of the message would fail the same way.
//
// A handler's error is judged by the transaction it ran in, where the middleware asks it,
// after its rollback (the claimed transaction's IsTransient): the infrastructure's only when
// the session of the inbox transaction broke, or the database raised it on that session. On a
// store made by [NewPgx] or [NewPgxPipeline] the handler's pgx.Tx records what its
// statements met, so that a deadlock of another database's is the message's; database/sql
// shows the store nothing of the handler's statements on a [*sql.Tx], so on a store made by
// [NewDB] or [NewMultiStatement] a handler's error that the dialect reports by its code is
// the infrastructure's wherever it was raised (those codes name a server's state or a race
// between transactions, which no message's content causes), and any other is the message's:
// a network error of a service the handler calls, an address it could not parse, a
// connection to another database it could not make, its own deadline.
func (s *Store) IsTransient(err error) bool {
	if err == nil || errors.Is(err, inbox.ErrRecordTooLarge) {
		return false
	}
	var own *storeError
	switch {
	case errors.As(err, &own), errors.Is(err, ErrTableMismatch), errors.Is(err, ErrMultiStatementRefused):
		return true
	}
	return s.sql.dialect.IsTransient(err)
}

// storeError is a failure of the store's own work for a message: a connection it could not
// acquire (the pool exhausted until the context's deadline, a database that does not answer),
// its BEGIN, lock timeout, claim or read of a committed claim, or its session's connection
// lost. Whatever the database said, the message is not at fault.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// acquireError is the error for a connection the store could not acquire.
func acquireError(err error) error {
	return &storeError{fmt.Errorf("sqlinbox: acquire a connection: %w", err)}
}

// connectionLost reports whether err, from a statement of the store's own that carries no
// value of the handler's (COMMIT, ROLLBACK), is its connection's failure: refused, reset,
// closed, timed out. Only there does the error's type tell: the same types come from a
// handler's call to another service and from an argument's driver.Valuer, which the session
// tells apart instead (session.lost).
func connectionLost(err error) bool {
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) || isInvalidConn(err)
}

// isInvalidConn recognises go-sql-driver/mysql's ErrInvalidConn, a connection that broke
// mid-statement, by its text: the library imports no MySQL driver.
func isInvalidConn(err error) bool {
	for _, e := range errorChain(err) {
		if e.Error() == "invalid connection" {
			return true
		}
	}
	return false
}

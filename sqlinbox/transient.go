package sqlinbox

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"

	inbox "github.com/inboxkit/watermill-inbox"
)

// IsTransient reports whether err, returned by the store or by a handler's statement on the
// store's transaction, is a failure of the database rather than of the message, which a
// later delivery of the same message gets past:
//
//   - the table check's refusal (ErrTableMismatch, a missing table among them), a
//     multi-statement store refused on this driver or server (ErrMultiStatementRefused),
//     and a MySQL connection refused for its character set (see MySQL);
//   - a failure of the store's own statements before the handler's (BEGIN, the lock
//     timeout, the claim, the read of a committed claim), and a connection that could not
//     be acquired;
//   - a connection that was refused, reset, closed or timed out, such as a COMMIT whose
//     outcome is unknown;
//   - what the dialect reports (Dialect.IsTransient): deadlocks and serialization
//     failures, lock timeouts, a read-only or starting server, a Galera node not ready.
//
// Everything else is the message's: a constraint that a handler's statement, a queued one or
// its COMMIT violates, say, and a request too large for the server (an error wrapping
// [inbox.ErrRecordTooLarge]), even when the server reset the connection over it: every
// delivery of the message would fail the same way.
func (s *Store) IsTransient(err error) bool {
	if err == nil || errors.Is(err, inbox.ErrRecordTooLarge) {
		return false
	}
	var own *storeError
	var netErr net.Error
	switch {
	case errors.As(err, &own),
		errors.Is(err, ErrTableMismatch), errors.Is(err, ErrMultiStatementRefused),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return true
	}
	return s.sql.dialect.IsTransient(err)
}

// storeError is a failure of the store's own work for a message, before the handler's
// statements: a connection it could not acquire (the pool exhausted until the context's
// deadline, a database that does not answer), or its BEGIN, lock timeout, claim or read of a
// committed claim. Whatever the database said, the message is not at fault.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// acquireError is the error for a connection the store could not acquire.
func acquireError(err error) error {
	return &storeError{fmt.Errorf("sqlinbox: acquire a connection: %w", err)}
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrMultiStatementRefused is wrapped by the error of every message of a store made by
// [NewMultiStatement] that cannot send its requests safely, and by the error of its CheckTable:
//
//   - its driver does not run multi-statement requests (go-sql-driver/mysql without
//     multiStatements=true and interpolateParams=true in the DSN): every request would fail;
//   - its server is a node of a Galera or Percona XtraDB Cluster (the dialect's
//     MultiStatementSQL.Refuse says so). There, a transaction that another node's write-set
//     aborts partway through a multi-statement request has the rest of the request run in
//     autocommit, so that claims are lost and writes doubled.
//
// Nothing is sent, claimed or committed, and in the claim-first mode the handler does not
// run: the message is nacked, and the store's IsTransient reports the error, so that
// inbox.Poisonous keeps the message out of the poison queue. The error says what to change:
// the DSN, or a store made by [NewDB], whose modes send a statement at a time and are exactly
// once on such a node.
var ErrMultiStatementRefused = errors.New("sqlinbox: multi-statement requests refused")

// refuse returns nil once the driver and the server passed the check, or an error wrapping
// [ErrMultiStatementRefused] that says why mode is refused and what to use instead. A refusal
// is kept for the store's life: it is a store chosen for the wrong database or configured
// with the wrong DSN, which a restart fixes, not the database.
func (s *Store) refuse(ctx context.Context, mode string) error {
	err := s.refusal.before(ctx, s.checkServer)
	var driverErr *driverRefusal
	if !errors.Is(err, ErrMultiStatementRefused) || errors.As(err, &driverErr) {
		return err
	}
	return fmt.Errorf("%w: %s on a multi-statement store sends multi-statement requests, and on such a node a "+
		"transaction that another node's write-set aborts runs the rest of its request in autocommit, which loses "+
		"claims and doubles writes; make the store with sqlinbox.NewDB: each statement then goes on its own, and "+
		"the default claim-first mode is exactly once on Galera", err, mode)
}

// driverRefusal is the refusal of a driver that does not run the dialect's Probe.
type driverRefusal struct{ err error }

func (e *driverRefusal) Error() string {
	return "sqlinbox: multi-statement requests refused: the driver does not run several statements in one call " +
		"with the parameters in the text (" + e.err.Error() + "); a multi-statement store needs go-sql-driver/mysql's " +
		"multiStatements=true and interpolateParams=true in the DSN (mysql.Config's MultiStatements and InterpolateParams)"
}

func (e *driverRefusal) Unwrap() []error { return []error{ErrMultiStatementRefused, e.err} }

// checkServer sends the dialect's Probe, then runs [MultiStatementSQL.Refuse]: an error wrapping
// [ErrMultiStatementRefused] if the driver fails the probe (with an error that is not the
// database's being away) or a value is ON, another error if a query failed (no verdict), nil
// if requests may be sent.
func (s *Store) checkServer(ctx context.Context) error {
	multi := s.sql.dialect.MultiStatement()
	if _, err := s.pool.exec(ctx, multi.Probe, 1, 1); err != nil {
		if s.IsTransient(err) {
			return fmt.Errorf("sqlinbox: send a multi-statement request: %w", err)
		}
		return &driverRefusal{err}
	}
	if multi.Refuse == "" {
		return nil
	}
	rows, err := s.pool.query(ctx, multi.Refuse)
	if err != nil {
		return fmt.Errorf("sqlinbox: ask the server whether it runs multi-statement requests safely: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return fmt.Errorf("sqlinbox: ask the server whether it runs multi-statement requests safely: %w", err)
		}
		if strings.EqualFold(value, "ON") {
			return fmt.Errorf("%w on a Galera or Percona XtraDB Cluster node (the server reports %s = %s)", ErrMultiStatementRefused, name, value)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlinbox: ask the server whether it runs multi-statement requests safely: %w", err)
	}
	return nil
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrMultiStatementRefused is wrapped by the error of every message of a store made by
// NewMultiStatement whose server is a node of a Galera or Percona XtraDB Cluster (the
// dialect's MultiStatementSQL.Refuse says so). There, a transaction that another node's
// write-set aborts partway through a multi-statement request has the rest of the request run
// in autocommit, so that claims are lost and writes doubled. Nothing is sent, claimed or
// committed, and in the claim-first mode the handler does not run: the message is nacked.
// The error names the mode; the fix is a store made by NewDB, whose modes send a statement
// at a time and are exactly once on such a node.
var ErrMultiStatementRefused = errors.New("sqlinbox: multi-statement requests refused on a Galera or Percona XtraDB Cluster node")

// refuse returns nil once the server passed the dialect's check, or an error wrapping
// ErrMultiStatementRefused that says why mode is refused and what to use instead. A refusal
// is kept for the store's life: it is a store chosen for the wrong database, which a restart
// with another store fixes, not the database.
func (s *Store) refuse(ctx context.Context, mode string) error {
	err := s.refusal.before(ctx, s.checkServer)
	if !errors.Is(err, ErrMultiStatementRefused) {
		return err
	}
	return fmt.Errorf("%w: %s on a multi-statement store sends multi-statement requests, and on such a node a "+
		"transaction that another node's write-set aborts runs the rest of its request in autocommit, which loses "+
		"claims and doubles writes; make the store with sqlinbox.NewDB: each statement then goes on its own, and "+
		"the default claim-first mode is exactly once on Galera", err, mode)
}

// checkServer runs MultiStatementSQL.Refuse: an error wrapping ErrMultiStatementRefused if a
// value is ON, another error if the query failed (no verdict), nil if requests may be sent.
func (s *Store) checkServer(ctx context.Context) error {
	refuse := s.sql.dialect.MultiStatement().Refuse
	if refuse == "" {
		return nil
	}
	rows, err := s.pool.query(ctx, refuse)
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
			return fmt.Errorf("%w (the server reports %s = %s)", ErrMultiStatementRefused, name, value)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlinbox: ask the server whether it runs multi-statement requests safely: %w", err)
	}
	return nil
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrMultiStatementsRefused is wrapped by the error of every message that a SQLStore with
// Config.MultiStatements would send as a text of several statements (ClaimAndCommit, and
// Claim on a *sql.DB opened on MySQLConnector) when the server is a node of a Galera or
// Percona XtraDB Cluster (the dialect's BatchSQL.Refuse says so). There, a transaction that
// another node's write-set aborts partway through a text has the rest of the text run in
// autocommit, so that claims are lost and writes doubled. Nothing is sent, claimed or
// committed, and in claim-first mode the handler does not run: the message is nacked. The
// message names the mode; the fix is Config.MultiStatements left false, whose modes are
// exactly once on such a node.
var ErrMultiStatementsRefused = errors.New("sqlinbox: Config.MultiStatements refused on a Galera or Percona XtraDB Cluster node")

// The modes that send texts, as refusals name them.
const (
	writeBehindTexts = "write-behind mode with Config.MultiStatements"
	claimFirstTexts  = "the claim-first mode with Config.MultiStatements on MySQLConnector"
)

// refuseTexts returns nil once the server passed the dialect's check of texts of several
// statements, or an error wrapping ErrMultiStatementsRefused that says why mode is refused
// and what to use instead.
func (s *SQLStore) refuseTexts(ctx context.Context, mode string) error {
	err := s.sql.texts.before(ctx, s.checkTexts)
	if !errors.Is(err, ErrMultiStatementsRefused) {
		return err
	}
	return fmt.Errorf("%w: %s sends texts of several statements, and on such a node a transaction that "+
		"another node's write-set aborts runs the rest of its text in autocommit, which loses claims and "+
		"doubles writes; leave Config.MultiStatements false: each statement then goes on its own, and "+
		"the default claim-first mode is exactly once on Galera", err, mode)
}

// checkTexts runs BatchSQL.Refuse: an error wrapping ErrMultiStatementsRefused if a value is
// ON, another error if the query failed (no verdict), nil if texts may be sent.
func (s *SQLStore) checkTexts(ctx context.Context) error {
	if s.sql.batch.Refuse == "" {
		return nil
	}
	rows, err := s.db.QueryContext(ctx, s.sql.batch.Refuse)
	if err != nil {
		return fmt.Errorf("sqlinbox: ask the server whether it runs texts of several statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return fmt.Errorf("sqlinbox: ask the server whether it runs texts of several statements: %w", err)
		}
		if strings.EqualFold(value, "ON") {
			return fmt.Errorf("%w (the server reports %s = %s)", ErrMultiStatementsRefused, name, value)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlinbox: ask the server whether it runs texts of several statements: %w", err)
	}
	return nil
}

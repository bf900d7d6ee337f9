package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
)

// ErrMultiStatementRefused is wrapped by the error of every message of a MultiStatementStore
// whose server is a node of a Galera or Percona XtraDB Cluster (the dialect's
// MultiStatementSQL.Refuse says so). There, a transaction that another node's write-set
// aborts partway through a multi-statement request has the rest of the request run in
// autocommit, so that claims are lost and writes doubled. Nothing is sent, claimed or
// committed, and in the claim-first mode the handler does not run: the message is nacked.
// The error names the mode; the fix is a store made by New, whose modes send a statement at
// a time and are exactly once on such a node.
var ErrMultiStatementRefused = errors.New("sqlinbox: multi-statement requests refused on a Galera or Percona XtraDB Cluster node")

// The modes of a MultiStatementStore, as refusals name them.
const (
	writeBehindMultiStatement = "write-behind mode on a MultiStatementStore"
	claimFirstMultiStatement  = "the claim-first mode on a MultiStatementStore"
)

// refuse returns nil once the server passed the dialect's check, or an error wrapping
// ErrMultiStatementRefused that says why mode is refused and what to use instead.
func (s *MultiStatementStore) refuse(ctx context.Context, mode string) error {
	err := s.guard.before(ctx, s.checkServer)
	if !errors.Is(err, ErrMultiStatementRefused) {
		return err
	}
	return fmt.Errorf("%w: %s sends multi-statement requests, and on such a node a transaction that "+
		"another node's write-set aborts runs the rest of its request in autocommit, which loses claims and "+
		"doubles writes; make the store with sqlinbox.New: each statement then goes on its own, and "+
		"the default claim-first mode is exactly once on Galera", err, mode)
}

// checkServer runs MultiStatementSQL.Refuse: an error wrapping ErrMultiStatementRefused if a
// value is ON, another error if the query failed (no verdict), nil if requests may be sent.
func (s *MultiStatementStore) checkServer(ctx context.Context) error {
	if s.multi.Refuse == "" {
		return nil
	}
	rows, err := s.store.db.QueryContext(ctx, s.multi.Refuse)
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

// multiStatementGuard runs a store's check of the server (MultiStatementSQL.Refuse) before
// its first multi-statement request and keeps the verdict for the store's life, as the table
// guard keeps a pass: a refusal is a store chosen for the wrong database, which a restart
// with another store fixes, not the database. A check that could not run (the database is
// down, a Galera node not yet synced) gives no verdict and is repeated by the next message.
type multiStatementGuard struct {
	decided atomic.Bool // refused is set before decided
	logger  watermill.LoggerAdapter

	mu      sync.Mutex // one check at a time; held by the messages that wait for it
	refused error      // the check's ErrMultiStatementRefused, if any
}

func newMultiStatementGuard(logger watermill.LoggerAdapter) *multiStatementGuard {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &multiStatementGuard{logger: logger}
}

// before returns nil once the server passed its check, the refusal once it failed it, and
// runs the check while neither stands.
func (g *multiStatementGuard) before(ctx context.Context, check func(context.Context) error) error {
	if g.decided.Load() {
		return g.refused
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.decided.Load() {
		return g.refused
	}
	err := check(ctx)
	switch {
	case err == nil:
		g.decided.Store(true)
	case errors.Is(err, ErrMultiStatementRefused):
		g.refused = err
		g.decided.Store(true)
		g.logger.Error("Multi-statement requests refused on this server: every message fails; "+
			"make the store with sqlinbox.New", err, nil)
	}
	return err
}

package handlertest

import (
	"context"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// followsStore checks, before any delivery, that handlertest can follow the store's
// transactions: it claims a key of its own under a consumer of its own and rolls the claim
// back. The handler must get a pgx.Tx, which handlertest wraps, or a transaction on a *sql.DB
// opened with [OpenDB] or on [Connector] (a *sql.Tx, or a data layer's over one,
// sqlinbox.Config.Begin), whose connection handlertest sees. In write-behind mode the handler
// gets no transaction, and handlertest fails statements inside the store: nothing to check.
func (s *session) followsStore() bool {
	s.t.Helper()
	if s.writeBehind() {
		return true
	}
	ctx, cancel := context.WithTimeout(s.base, s.o.Deadline)
	defer cancel()
	a := &attempt{label: "the store check"}
	tx, prior, err := s.store.Claim(withAttempt(ctx, a), inbox.Claim{Consumer: s.consumer("check"), Key: "handlertest-check-" + s.run})
	if err != nil {
		s.report(Problem{What: "the store's claim failed before any delivery: " + err.Error()})
		return false
	}
	if prior != nil || tx == nil {
		return true // a key of handlertest's own, never claimed: a store that says otherwise is checked by the scenarios
	}
	v := a.view()
	rollbackErr := tx.Rollback(withAttempt(ctx, a))
	if !v.pgx && !v.bound {
		s.report(Problem{What: fmt.Sprintf("the store's transaction is a %s on a *sql.DB the kit does not see: open the *sql.DB of the store "+
			"and of the handler's repositories with handlertest.OpenDB, or with sql.OpenDB(handlertest.Connector(...))", v.txType)})
		return false
	}
	if rollbackErr != nil {
		s.report(Problem{What: "the store's rollback failed before any delivery: " + rollbackErr.Error()})
		return false
	}
	return true
}

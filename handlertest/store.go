package handlertest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
)

// store wraps the team's store: it follows each attempt (found in the context) through the
// claim and the commit, hands the handler a counting [pgx.Tx], and injects the failures that
// happen inside the store (COMMIT, queued statements, write-behind statements).
//
// It is a comparable value holding nothing but the inner store, so that every session built
// on one [Case] has an equal store: an [inbox.Publisher] is bound to the store of the first
// middleware it publishes for, and the same Case may be run by several scenario calls.
type store struct{ inner inbox.Store }

// writeBehindStore is store for an inner store that implements [inbox.WriteBehindStore];
// the middleware then uses ClaimAndCommit, as it does with the inner store.
type writeBehindStore struct{ store }

var (
	_ inbox.Store            = store{}
	_ inbox.WriteBehindStore = writeBehindStore{}
)

func wrapStore(inner inbox.Store) inbox.Store {
	if _, ok := inner.(inbox.WriteBehindStore); ok {
		return writeBehindStore{store{inner}}
	}
	return store{inner}
}

func (s store) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	a, ok := attemptFrom(ctx)
	if !ok {
		return s.inner.Claim(ctx, claim)
	}
	a.claiming()
	tx, prior, err := s.inner.Claim(ctx, claim)
	if err != nil || prior != nil {
		a.mu.Lock()
		a.duplicate = prior != nil
		a.phase = phaseDone
		a.mu.Unlock()
		return tx, prior, err
	}
	return wrapTx(tx, a), nil, nil
}

func (s writeBehindStore) ClaimAndCommit(ctx context.Context, claim inbox.Claim, statements []inbox.Statement,
	produced []byte,
) (*inbox.Record, error) {
	wb := s.inner.(inbox.WriteBehindStore)
	a, ok := attemptFrom(ctx)
	if !ok {
		return wb.ClaimAndCommit(ctx, claim, statements, produced)
	}
	a.setPhase(phaseEnding)
	defer a.setPhase(phaseDone)
	a.recorded(produced)
	statements = a.writeBehind(statements)
	prior, err := wb.ClaimAndCommit(ctx, claim, statements, produced)
	if prior != nil {
		a.mu.Lock()
		a.duplicate = true
		a.mu.Unlock()
	}
	return prior, err
}

// writeBehind counts the statements the handler queued in write-behind mode and returns
// them as the store gets them: the k-th replaced by a failing text, or a failing text
// after the last for a failed COMMIT, so that the real database rolls back.
func (a *attempt) writeBehind(statements []inbox.Statement) []inbox.Statement {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]inbox.Statement, 0, len(statements)+1)
	for _, st := range statements {
		a.statements = append(a.statements, st.SQL)
		if a.inject.kind == injectStatement && a.inject.k == len(a.statements) {
			a.reached = true
			st = inbox.Statement{SQL: failingSQL}
		}
		out = append(out, st)
	}
	if a.inject.kind == injectCommit {
		a.reached = true
		out = append(out, inbox.Statement{SQL: failingSQL})
	}
	return out
}

// tx wraps the store's transaction for one attempt.
type tx struct {
	inner  inbox.Tx
	a      *attempt
	driver any // what the handler gets: the kit's pgx.Tx, or the store's own
}

func wrapTx(inner inbox.Tx, a *attempt) inbox.Tx {
	t := &tx{inner: inner, a: a, driver: inner.Handle()}
	ptx, isPgx := t.driver.(pgx.Tx)
	a.mu.Lock()
	a.txType, a.pgx = fmt.Sprintf("%T", t.driver), isPgx
	a.mu.Unlock()
	if isPgx {
		t.driver = &pgxTx{inner: ptx, a: a}
	}
	return t
}

func (t *tx) Handle() any { return t.driver }

// Commit commits, or, when the attempt's injection is COMMIT, rolls back for real and
// returns an error wrapping [ErrInjected], as a COMMIT the database refused would.
func (t *tx) Commit(ctx context.Context, produced []byte) error {
	t.a.setPhase(phaseEnding)
	defer t.a.setPhase(phaseDone)
	t.a.recorded(produced)
	if t.a.inject.kind == injectCommit {
		t.a.mu.Lock()
		t.a.reached = true
		t.a.mu.Unlock()
		err := fmt.Errorf("%w: COMMIT (the transaction was rolled back)", ErrInjected)
		if rbErr := t.inner.Rollback(ctx); rbErr != nil {
			err = errors.Join(err, rbErr)
		}
		return err
	}
	return t.inner.Commit(ctx, produced)
}

func (t *tx) Rollback(ctx context.Context) error {
	t.a.setPhase(phaseEnding)
	defer t.a.setPhase(phaseDone)
	return t.inner.Rollback(ctx)
}

// ExecAtCommit forwards a deferred statement, or a failing text in its place when it is the
// injection point: the store sends it at COMMIT, the database refuses it, and everything
// rolls back.
func (t *tx) ExecAtCommit(sql string, args ...any) {
	if t.a.queued(sql) == inject {
		t.inner.ExecAtCommit(failingSQL)
		return
	}
	t.inner.ExecAtCommit(sql, args...)
}

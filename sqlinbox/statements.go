package sqlinbox

import (
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/record"
)

// statements is what a store sends, rendered once at construction: nothing is formatted per
// message.
type statements struct {
	dialect Dialect
	table   Table

	begin                      string
	insert, insertOrSkip       string // insertOrSkip: "" where the dialect has none
	selectClaim, updateProduce string
	lockTimeout                string // "" when Config.LockTimeout is 0
	lockTimeoutArgs            []any

	schema       []string
	schemaLock   string
	describe     string
	describeArgs []any

	deleteExpired, countExpired string
	lockTake, lockRelease       string
	lockKey                     any

	relay *RelaySQL // the dialect's marks, nil if it has none; used on a table with the column

	// The dialect's commitGuard, if it has one: "" each where it has none.
	txMark, txCheck string
	txCheckRow      bool // txCheck returns a row for a transaction that is the claim's, and takes the claim's consumer and key
}

func newStatements(dialect Dialect, config Config) (statements, error) {
	config.setDefaults()
	if err := config.validate(); err != nil {
		return statements{}, err
	}
	table, err := parseTable(dialect, config.Table)
	if err != nil {
		return statements{}, err
	}
	s := statements{
		dialect:       dialect,
		table:         table,
		begin:         dialect.Begin(),
		insert:        dialect.InsertClaim(table),
		insertOrSkip:  dialect.InsertClaimOrSkip(table),
		selectClaim:   dialect.SelectClaim(table),
		updateProduce: dialect.UpdateProduced(table),
		schema:        dialect.CreateTable(table),
		schemaLock:    dialect.SchemaLock(),
		deleteExpired: dialect.DeleteExpired(table),
		countExpired:  dialect.CountExpired(table),
	}
	s.describe, s.describeArgs = dialect.DescribeTable(table)
	if s.relay = dialect.Relay(table); s.relay != nil {
		r := s.relay
		if r.Record == "" || r.SelectClaim == "" || r.DeleteExpired == "" || r.CountExpired == "" || r.Mark == nil || r.Take == "" || r.Backlog == "" {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q: its Relay leaves a statement empty: give them all, or return nil", dialect.Name())
		}
	}
	if guard, ok := dialect.(commitGuard); ok {
		s.txMark, s.txCheck, s.txCheckRow = guard.commitCheck(table)
	}
	s.lockTake, s.lockRelease, s.lockKey = dialect.CleanupLock(table)
	for _, required := range []struct{ text, method string }{
		{s.begin, "Begin"}, {s.insert, "InsertClaim"}, {s.selectClaim, "SelectClaim"},
		{s.updateProduce, "UpdateProduced"}, {s.describe, "DescribeTable"},
	} {
		if required.text == "" {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q has no %s", dialect.Name(), required.method)
		}
	}
	if config.LockTimeout > 0 {
		s.lockTimeout, s.lockTimeoutArgs = dialect.LockTimeout(config.LockTimeout)
		if s.lockTimeout == "" {
			return statements{}, fmt.Errorf("sqlinbox: dialect %q has no LockTimeout: leave Config.LockTimeout 0", dialect.Name())
		}
	}
	return s, nil
}

// params returns the inbox's own values as the dialect's statements take them.
func (s statements) params(values ...any) []any {
	for i, v := range values {
		values[i] = s.dialect.Param(v)
	}
	return values
}

// claimStatement is the claim as the store sends it: with skip, the statement that skips a
// duplicate (it returns a row only for a new claim) where the dialect has one, else the plain
// insert that fails on a duplicate.
func (s statements) claimStatement(claim inbox.Claim, skip bool, inserted *bool) statement {
	args := s.params(claim.Consumer, claim.Key, claim.Fingerprint)
	if skip && s.insertOrSkip != "" {
		return statement{sql: s.insertOrSkip, args: args, found: inserted, kind: kindClaim}
	}
	return statement{sql: s.insert, args: args, kind: kindClaim}
}

// recordedClaimStatement is the write-behind claim that also stores produced, marked
// unpublished, as claimStatement chooses between skipping and failing; ok is false where the
// dialect has none, or produced holds no messages: the claim is then claimStatement's and the
// record recordStatement's.
func (s statements) recordedClaimStatement(claim inbox.Claim, produced []byte, marks, skip bool, inserted *bool) (st statement, ok bool) {
	if !marks || s.relay.InsertUnpublished == "" || !record.Pending(produced) {
		return statement{}, false
	}
	args := s.params(claim.Consumer, claim.Key, claim.Fingerprint, produced)
	if skip && s.relay.InsertUnpublishedOrSkip != "" {
		return statement{sql: s.relay.InsertUnpublishedOrSkip, args: args, found: inserted, kind: kindClaim}, true
	}
	return statement{sql: s.relay.InsertUnpublished, args: args, kind: kindClaim}, true
}

// lockTimeoutStatement is the lock timeout's statement, or none.
func (s statements) lockTimeoutStatement() []statement {
	if s.lockTimeout == "" {
		return nil
	}
	return []statement{{sql: s.lockTimeout, args: s.lockTimeoutArgs, kind: kindLockTimeout}}
}

// txMarkStatement marks the claim's transaction for txCheckStatement, or is none.
func (s statements) txMarkStatement() []statement {
	if s.txMark == "" {
		return nil
	}
	return []statement{{sql: s.txMark, kind: kindTxMark}}
}

// txCheckStatement checks, before COMMIT, that the transaction is still the claim's; found
// receives whether it returned a row, for a check that says so by its row. It is none if the
// dialect has no check.
func (s statements) txCheckStatement(claim inbox.Claim, found *bool) []statement {
	switch {
	case s.txCheck == "":
		return nil
	case s.txCheckRow:
		return []statement{{sql: s.txCheck, args: s.params(claim.Consumer, claim.Key), kind: kindTxCheck, found: found}}
	}
	return []statement{{sql: s.txCheck, kind: kindTxCheck}}
}

// recordStatement stores produced with the claim; with marks (a table with the column
// unpublished), a record that holds messages is marked unpublished in the same statement.
func (s statements) recordStatement(claim inbox.Claim, produced []byte, marks bool) statement {
	text := s.updateProduce
	if marks && record.Pending(produced) {
		text = s.relay.Record
	}
	return statement{sql: text, args: s.params(produced, claim.Consumer, claim.Key), kind: kindRecord}
}

// selectClaimSQL is the read of a duplicate's committed claim; with marks it also reads
// whether the record has been published (see scanClaim).
func (s statements) selectClaimSQL(marks bool) string {
	if marks {
		return s.relay.SelectClaim
	}
	return s.selectClaim
}

// expiredSQL are retention's statements; with marks they leave unpublished records out.
func (s statements) expiredSQL(marks bool) (deleteExpired, countExpired string) {
	if marks {
		return s.relay.DeleteExpired, s.relay.CountExpired
	}
	return s.deleteExpired, s.countExpired
}

// selectClaimArgs are the parameters of SelectClaim.
func (s statements) selectClaimArgs(claim inbox.Claim) []any {
	return s.params(claim.Consumer, claim.Key)
}

// scanClaim reads the committed claim's record. No row means it was deleted between the
// claim and the read (retention): an error, so the message is redelivered and claimed anew.
// With marks the read has a third column, not NULL once the record is published.
func scanClaim(row interface{ Scan(...any) error }, marks bool) (*inbox.Record, error) {
	var prior inbox.Record
	var published []byte
	dest := []any{&prior.Fingerprint, &prior.Produced}
	if marks {
		dest = append(dest, &published)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", err)
	}
	prior.Published = published != nil
	return &prior, nil
}

// claimRead is the read of a duplicate's committed claim, as a session sends it.
type claimRead struct {
	sql   string
	args  []any
	marks bool // the read has the third column of selectClaimSQL(true)
}

package inbox

import (
	"context"
	"errors"
	"fmt"
)

// claimAndCommit claims, runs the queued statements, records produced and commits: in one
// step on a WriteBehindStore, else through Claim and Commit, in the same order. A key that
// is committed already returns what its row recorded, with nothing written.
func claimAndCommit(ctx context.Context, store Store, claim Claim, queued []Statement, produced []byte) (*Processed, error) {
	if wb, ok := store.(WriteBehindStore); ok {
		return wb.ClaimAndCommit(ctx, claim, queued, produced)
	}
	tx, prior, err := store.Claim(ctx, claim)
	if err != nil || prior != nil {
		return prior, err
	}
	if len(queued) > 0 {
		queuer, ok := tx.(StatementQueuer)
		if !ok {
			err := fmt.Errorf("inbox: the store's transaction %T cannot queue statements", tx)
			return nil, errors.Join(err, tx.Rollback(ctx))
		}
		for _, s := range queued {
			queuer.Queue(s.SQL, s.Args...)
		}
	}
	return nil, tx.Commit(ctx, produced)
}

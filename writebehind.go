package inbox

import "context"

// claimAndCommit claims, runs the queued statements, records produced and commits: in one
// step on a [WriteBehindStore], else through [Claim] and Commit, in the same order. A key that
// is committed already returns what its row recorded, with nothing written.
func claimAndCommit(ctx context.Context, store Store, claim Claim, queued []Statement, produced []byte) (*Record, error) {
	if wb, ok := store.(WriteBehindStore); ok {
		return wb.ClaimAndCommit(ctx, claim, queued, produced)
	}
	tx, prior, err := store.Claim(ctx, claim)
	if err != nil || prior != nil {
		return prior, err
	}
	for _, s := range queued {
		tx.ExecAtCommit(s.SQL, s.Args...)
	}
	return nil, tx.Commit(ctx, produced)
}

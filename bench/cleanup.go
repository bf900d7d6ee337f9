package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

const (
	vClaimsAlone   = "claims alone"
	vDuringCleanup = "claims during cleanup"
	dCleanupRate   = "cleanup: rows deleted per second, claims running"
)

// fillExpired fills an inbox table with $1 rows in $2 chunks of $3 rows; chunk j (0-based) is
// ($2 - j) days and one hour old, so a cleanup with a retention of ($2 - q) days deletes
// chunk q and nothing younger. Keys are 36 characters like a UUID, but sequential, which keeps
// the fill fast; the claims that run meanwhile use random (v4) keys.
const fillExpired = `INSERT INTO %s (consumer, message_id, processed_at, payload_hash)
SELECT $4, '00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'),
       now() - make_interval(days => ($2::bigint - g / $3::bigint)::int) - interval '1 hour', $5::bytea
FROM generate_series(0, $1::bigint - 1) g`

// runCleanup is the cleanup scenario: the retention cleanup's speed, and what it does to claims into
// the same table meanwhile.
func runCleanup(ctx context.Context, e *env, rep *report) error {
	table, store, err := newPgxInbox(ctx, e, "bench_cleanup")
	if err != nil {
		return err
	}
	// Each round of each worker count deletes a chunk while claims run.
	chunks := int64(len(e.opts.workers) * e.opts.rounds)
	chunk := e.opts.cleanChunk
	hash := inbox.PayloadSHA256(message.NewMessage("", benchPayload))
	log.Printf("cleanup: filling %d chunks of %s expired rows", chunks, humanRows(chunk))
	started := time.Now()
	if _, err := e.pg.Exec(ctx, fmt.Sprintf(fillExpired, table), chunks*chunk, chunks, chunk, benchConsumer, hash); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if _, err := e.pg.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return err
	}
	rep.note("cleanup", "%s expired rows (%d chunks of %s) filled in %s.", humanRows(chunks*chunk), chunks, humanRows(chunk), time.Since(started).Round(100*time.Millisecond))

	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: benchConsumer}, nil)
	if err != nil {
		return err
	}
	claim := handlerOp(mw(noopHandler), freshKey)
	next := int64(0) // the next chunk to delete
	day := 24 * time.Hour
	cleanRound := func(ctx context.Context, workers int) (roundResult, float64, error) {
		if next >= chunks {
			return roundResult{}, 0, errors.New("no expired chunk left")
		}
		olderThan := time.Duration(chunks-next) * day
		next++
		stop := make(chan struct{})
		type outcome struct {
			deleted int64
			elapsed time.Duration
			err     error
		}
		done := make(chan outcome, 1)
		go func() {
			defer close(stop)
			t0 := time.Now()
			n, err := store.Cleanup(ctx, olderThan, sqlinbox.CleanupConfig{})
			done <- outcome{n, time.Since(t0), err}
		}()
		res, err := runFor(ctx, workers, 0, stop, claim)
		out := <-done
		if err = errors.Join(err, out.err); err != nil {
			return res, 0, err
		}
		if out.deleted != chunk {
			return res, 0, fmt.Errorf("cleanup deleted %d rows, want %d", out.deleted, chunk)
		}
		return res, float64(out.deleted) / out.elapsed.Seconds(), nil
	}

	for _, workers := range e.opts.workers {
		log.Printf("cleanup, %d workers", workers)
		var withClaims []float64
		during := variant{name: vDuringCleanup, run: func(ctx context.Context, workers int) (roundResult, error) {
			res, rate, err := cleanRound(ctx, workers)
			withClaims = append(withClaims, rate)
			return res, err
		}}
		claimsAlone := timedVariant(vClaimsAlone, e.opts.round, claim)
		results, err := interleave(ctx, workers, e.opts.rounds, e.opts.round/4, []variant{claimsAlone, during})
		if err != nil {
			return err
		}
		at := at{scenario: "cleanup", db: "postgres", workers: workers}
		rep.add(at, []string{vClaimsAlone, vDuringCleanup}, results, 0)
		rep.addDerived(at, dCleanupRate, withClaims)
	}
	return nil
}

// noopHandler does nothing: the inbox's claim and COMMIT are all a message costs.
func noopHandler(*message.Message) ([]*message.Message, error) { return nil, nil }

// newPgxInbox creates an inbox table under a random name and returns its store.
func newPgxInbox(ctx context.Context, e *env, prefix string) (string, *sqlinbox.Store, error) {
	table := e.table("postgres", prefix)
	store, err := sqlinbox.NewPgx(e.pg, sqlinbox.Config{Table: table})
	if err != nil {
		return "", nil, err
	}
	return table, store, store.InitializeSchema(ctx)
}

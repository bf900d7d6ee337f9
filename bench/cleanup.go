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
	variantClaimsAlone   = "claims alone"
	variantDuringCleanup = "claims during cleanup"
	derivedCleanupRate   = "cleanup: rows deleted per second"
)

// fillExpired fills an inbox table with $1 rows in $2 chunks of $3 rows; chunk j (0-based) is
// ($2 - j) days and one hour old, so a cleanup with a retention of ($2 - q) days deletes
// chunk q and nothing younger. Keys are time-ordered (v7-shaped) to keep the fill fast.
const fillExpired = `INSERT INTO %s (consumer, message_id, processed_at, payload_hash)
SELECT $4, substr(h,1,8)||'-'||substr(h,9,4)||'-'||substr(h,13,4)||'-'||substr(h,17,4)||'-'||substr(h,21,12),
       now() - make_interval(days => ($2::bigint - g / $3::bigint)::int) - interval '1 hour', $5::bytea
FROM (SELECT g, lpad(to_hex($6::bigint - ($1::bigint - g) / 10), 12, '0') || '7' || substr(r, 1, 3) || '8' || substr(r, 4, 15) AS h
      FROM (SELECT g, md5(g::text) AS r FROM generate_series(0, $1::bigint - 1) g) s) t`

// runCleanup is scenario 4: the retention cleanup's speed, and what it does to claims into
// the same table meanwhile.
func runCleanup(ctx context.Context, e *env, rep *report) error {
	table, store, err := newPgxInbox(ctx, e, "bench_cleanup")
	if err != nil {
		return err
	}
	workerCounts := append([]int{0}, e.opts.workers...) // 0: the cleanup alone
	chunks := int64(len(workerCounts) * e.opts.rounds)
	chunk := e.opts.cleanChunk
	hash := inbox.PayloadSHA256(message.NewMessage("", benchPayload))
	log.Printf("cleanup: filling %d chunks of %s expired rows", chunks, humanRows(chunk))
	started := time.Now()
	if _, err := e.pg.Exec(ctx, fmt.Sprintf(fillExpired, table), chunks*chunk, chunks, chunk, benchConsumer, hash,
		time.Now().Add(-time.Hour).UnixMilli()); err != nil {
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
		var res roundResult
		var err error
		if workers > 0 {
			res, err = runFor(ctx, workers, 0, stop, claim)
		} else {
			<-stop
		}
		out := <-done
		if err = errors.Join(err, out.err); err != nil {
			return res, 0, err
		}
		if out.deleted != chunk {
			return res, 0, fmt.Errorf("cleanup deleted %d rows, want %d", out.deleted, chunk)
		}
		return res, float64(out.deleted) / out.elapsed.Seconds(), nil
	}

	for _, workers := range workerCounts {
		log.Printf("cleanup, %d workers", workers)
		var rowsPerSec []float64
		during := variant{name: variantDuringCleanup, run: func(ctx context.Context, workers int) (roundResult, error) {
			res, rate, err := cleanRound(ctx, workers)
			rowsPerSec = append(rowsPerSec, rate)
			return res, err
		}}
		if workers == 0 {
			for range e.opts.rounds {
				if _, err := during.run(ctx, 0); err != nil {
					return err
				}
			}
			rep.addDerived("cleanup", "postgres", 0, derivedCleanupRate+" (no claims)", "", rowsPerSec)
			continue
		}
		alone := timedVariant(variantClaimsAlone, e.opts.round, claim)
		results, err := interleave(ctx, workers, e.opts.rounds, e.opts.round/4, []variant{alone, during})
		if err != nil {
			return err
		}
		rep.add("cleanup", "postgres", workers, []string{variantClaimsAlone, variantDuringCleanup}, results, 0)
		rep.addDerived("cleanup", "postgres", workers, derivedCleanupRate, "", rowsPerSec)
	}
	return nil
}

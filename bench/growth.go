package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// fillV4 fills an inbox table with n claims of consumer $1 with random (v4) keys, in the
// order they are generated: the primary key grows by random inserts, as a real inbox's does.
const fillV4 = `INSERT INTO %s (consumer, message_id, payload_hash)
SELECT $1, gen_random_uuid()::text, $2::bytea FROM generate_series(1, $3::bigint)`

// fillV7 fills an inbox table with n claims of consumer $1 whose keys are shaped like UUIDv7
// (48-bit Unix milliseconds, version 7, random bits), ten per millisecond, all older than $4
// (Unix ms): the keys the benchmark claims afterwards (uuid.NewV7) sort after them.
const fillV7 = `INSERT INTO %s (consumer, message_id, payload_hash)
SELECT $1, substr(h,1,8)||'-'||substr(h,9,4)||'-'||substr(h,13,4)||'-'||substr(h,17,4)||'-'||substr(h,21,12), $2::bytea
FROM (SELECT lpad(to_hex($4::bigint - ($3::bigint - g) / 10), 12, '0') || '7' || substr(r, 1, 3) || '8' || substr(r, 4, 15) AS h
      FROM (SELECT g, md5(g::text) AS r FROM generate_series(1, $3::bigint) g) s) t`

// keyKinds are the kinds of keys the growth scenario claims.
var keyKinds = map[string]struct {
	fill string
	key  func(int) string
}{
	"v4": {fillV4, func(int) string { return uuid.NewString() }},
	"v7": {fillV7, func(int) string { return uuid.Must(uuid.NewV7()).String() }},
}

// tableSize is what pg_*_size report for a table.
type tableSize struct{ total, heap, indexes int64 }

func pgTableSize(ctx context.Context, e *env, table string) (tableSize, error) {
	var s tableSize
	err := e.pg.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_relation_size($1::regclass), pg_indexes_size($1::regclass)`, table).
		Scan(&s.total, &s.heap, &s.indexes)
	return s, err
}

// noopHandler does nothing: the inbox's claim and COMMIT are all a message costs.
func noopHandler(*message.Message) ([]*message.Message, error) { return nil, nil }

// newPgxInbox creates an inbox table under a random name and returns its store.
func newPgxInbox(ctx context.Context, e *env, prefix string) (string, *sqlinbox.PgxStore, error) {
	table := e.table("postgres", prefix)
	store, err := sqlinbox.NewPgx(e.pg, sqlinbox.Config{Table: table})
	if err != nil {
		return "", nil, err
	}
	return table, store, store.InitializeSchema(ctx)
}

// runGrowth is scenario 3: claim throughput with rows already in the inbox.
func runGrowth(ctx context.Context, e *env, rep *report) error {
	hash := inbox.PayloadSHA256(message.NewMessage("", benchPayload))
	d := e.opts.round
	for _, kind := range e.opts.growthIDs {
		k := keyKinds[kind]
		var (
			variants []variant
			names    []string
			tables   []string
		)
		for _, n := range e.opts.growthRows {
			table, store, err := newPgxInbox(ctx, e, "bench_growth")
			if err != nil {
				return err
			}
			tables = append(tables, table)
			if n > 0 {
				started := time.Now()
				log.Printf("growth: filling %s rows with %s keys", humanRows(n), kind)
				args := []any{benchConsumer, hash, n}
				if kind == "v7" {
					args = append(args, time.Now().Add(-time.Second).UnixMilli())
				}
				if _, err := e.pg.Exec(ctx, fmt.Sprintf(k.fill, table), args...); err != nil {
					return fmt.Errorf("fill %s: %w", table, err)
				}
				filled := time.Since(started)
				if _, err := e.pg.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
					return err
				}
				size, err := pgTableSize(ctx, e, table)
				if err != nil {
					return err
				}
				perM := func(b int64) float64 { return float64(b) / (1 << 20) / (float64(n) / 1e6) }
				rep.note("growth", "%s keys, %s rows: filled in %s (one INSERT ... SELECT generate_series, then VACUUM ANALYZE); "+
					"total %.0f MiB = **%.0f MiB per million rows** (heap %.0f, indexes %.0f: primary key and processed_at)",
					kind, humanRows(n), filled.Round(100*time.Millisecond), float64(size.total)/(1<<20), perM(size.total), perM(size.heap), perM(size.indexes))
			}
			mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: benchConsumer}, nil)
			if err != nil {
				return err
			}
			name := growthName(kind, n)
			names = append(names, name)
			variants = append(variants, timedVariant(name, d, handlerOp(mw(noopHandler), k.key)))
		}
		for _, workers := range e.opts.workers {
			log.Printf("growth %s, %d workers", kind, workers)
			results, err := interleave(ctx, workers, e.opts.rounds, d/4, variants)
			if err != nil {
				return err
			}
			rep.add("growth", "postgres", workers, names, results, 0)
			for i, n := range e.opts.growthRows {
				rep.growth = append(rep.growth, growthPoint{ids: kind, rows: n, workers: workers, rate: spreadOf(rates(results[i]))})
			}
		}
		for _, t := range tables { // free the space before the next kind
			if err := e.drop(ctx, "postgres", t); err != nil {
				return err
			}
		}
	}
	rep.note("growth", "The empty inbox grows during the run by the claims it takes (a few thousand rows per round).")
	return nil
}

func growthName(kind string, rows int64) string {
	return fmt.Sprintf("%s keys, %s rows", kind, humanRows(rows))
}

// growthRowsOf parses the row count back out of a growth variant's name.
func growthRowsOf(name string) int64 {
	var kind, rows string
	if _, err := fmt.Sscanf(name, "%s keys, %s rows", &kind, &rows); err != nil {
		return 0
	}
	var n int64
	var unit string
	fmt.Sscanf(rows, "%d%s", &n, &unit)
	switch unit {
	case "M":
		n *= 1_000_000
	case "k":
		n *= 1000
	}
	return n
}

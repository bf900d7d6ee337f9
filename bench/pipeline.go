package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The pipeline scenario: write-behind mode on NewPgx (a connection and a round trip per
// message) against the same mode on NewPgxPipeline (the requests of the messages in flight
// at once in one pipeline per connection), at 8 connections, with each message's latency; and
// on MariaDB, NewMultiStatement's write-behind mode against NewMultiStatementCoalesced's (the
// messages in flight at once in one multi-statement request per connection).

// pipelineConns is the connections both stores' variants of "8 workers" use: write-behind
// holds one per message in flight; the pipelined store sends on as many lanes.
const pipelineConns = 8

// The variants; the targets look them up by name.
var (
	vWB1    = fmt.Sprintf("write-behind, %d in flight", 1)
	vWB8    = fmt.Sprintf("write-behind, %d in flight", pipelineConns)
	vWB32   = fmt.Sprintf("write-behind, %d in flight", 4*pipelineConns)
	vPipe1  = fmt.Sprintf("pipelined, %d in flight", 1)
	vPipe8  = fmt.Sprintf("pipelined, %d in flight", pipelineConns)
	vPipe32 = fmt.Sprintf("pipelined, %d in flight", 4*pipelineConns)
	vPipe64 = fmt.Sprintf("pipelined, %d in flight", 8*pipelineConns)
)

// coalescedName is a pipelined variant's name on MariaDB's coalesced store.
func coalescedName(name string) string { return strings.Replace(name, "pipelined", "coalesced", 1) }

// pipelineVariants are the variants in the order of a round: how many deliveries are in
// flight at once, and whether the pipelined store takes them.
var pipelineVariants = []struct {
	name      string
	inFlight  int
	pipelined bool
}{
	{vWB8, pipelineConns, false}, // the baseline
	{vPipe64, 8 * pipelineConns, true},
	{vWB32, 4 * pipelineConns, false},
	{vPipe32, 4 * pipelineConns, true},
	{vPipe8, pipelineConns, true},
	{vWB1, 1, false},
	{vPipe1, 1, true},
}

// latencyName names the derived figure of a variant's latency at quantile q.
func latencyName(q, variant string) string { return q + " latency per message, " + variant }

// runPipeline is the pipeline scenario at each -pipeline-delays setting.
func runPipeline(ctx context.Context, e *env, rep *report) error {
	for _, delay := range e.opts.pipelineDelays {
		config, err := pgxpool.ParseConfig(e.opts.postgres)
		if err != nil {
			return fmt.Errorf("postgres URL: %w", err)
		}
		config.MaxConns = int32(4*pipelineConns + 4)
		target := net.JoinHostPort(config.ConnConfig.Host, fmt.Sprint(config.ConnConfig.Port))
		pool, err := e.pgPoolVia(ctx, config, target, delay)
		if err != nil {
			return err
		}
		b, err := pgBackend(ctx, e, pool, delay)
		if err == nil {
			b.scenario = "pipeline"
			log.Printf("pipeline: postgres, %s each way: round trip %s", delay, b.rtt)
			var pipelined *sqlinbox.Store
			pipelined, err = sqlinbox.NewPgxPipeline(pool, sqlinbox.Config{Table: e.table("postgres", "bench_pipe_inbox")},
				sqlinbox.PipelineConfig{Connections: pipelineConns, Messages: 8})
			if err == nil {
				err = b.measurePipeline(ctx, e, rep, b.store, pipelined, func(name string) string { return name })
			}
		}
		pool.Close()
		if err != nil {
			return fmt.Errorf("pipeline, %s each way: %w", delay, err)
		}
		if e.mysql != nil {
			if err := runCoalesced(ctx, e, rep, delay); err != nil {
				return fmt.Errorf("pipeline, mysql, %s each way: %w", delay, err)
			}
		}
	}
	return nil
}

// runCoalesced is the pipeline scenario on MariaDB at one delay: NewMultiStatement's
// write-behind mode against NewMultiStatementCoalesced's, and the hand-written floor of the
// latter (coalescedFloor).
func runCoalesced(ctx context.Context, e *env, rep *report, delay time.Duration) error {
	addr, err := e.mysqlAt(ctx, delay)
	if err != nil {
		return err
	}
	b, err := sqlBackend(ctx, e, "mysql", addr.plain, addr.connector, delay)
	if err != nil {
		return err
	}
	b.scenario = "pipeline"
	log.Printf("pipeline: mysql, %s each way: round trip %s", delay, b.rtt)
	table := e.table("mysql", "bench_pipe_inbox")
	coalesced, db, err := sqlinbox.NewMultiStatementCoalesced(addr.connector, sqlinbox.MySQL{},
		sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{Connections: pipelineConns, Messages: 8})
	if err != nil {
		return err
	}
	e.sized(db)
	e.onClose(func() { db.Close() })
	floor, closeFloor, err := coalescedFloor(ctx, addr.connector, table, b.insert, e.opts.round)
	if err != nil {
		return err
	}
	defer closeFloor()
	return b.measurePipeline(ctx, e, rep, b.multiStore, coalesced, coalescedName, floor)
}

// measurePipeline runs the variants on b, interleaved, write-behind on baseline and the
// pipelined ones on pipelined, and records their throughput and the 50th and 99th percentile
// of their latency per message, round by round; named gives a variant its name on b's
// database; floors run interleaved with them.
func (b *backend) measurePipeline(ctx context.Context, e *env, rep *report, baseline inbox.Store, pipelined *sqlinbox.Store, named func(string) string, floors ...variant) error {
	if err := pipelined.InitializeSchema(ctx); err != nil {
		return err
	}
	queue := func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.ExecAtCommit(msg.Context(), b.insert, msg.UUID, customer, amountCents)
	}
	names := make([]string, len(pipelineVariants))
	variants := make([]variant, len(pipelineVariants))
	p50s, p99s := make([][]float64, len(variants)), make([][]float64, len(variants))
	for i, pv := range pipelineVariants {
		store, name := baseline, named(pv.name)
		if pv.pipelined {
			store = pipelined
		}
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: benchConsumer, WriteBehind: true}, nil)
		if err != nil {
			return err
		}
		var runs atomic.Int64
		lat := &latencies{}
		o := lat.timed(handlerOp(mw(func(msg *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return queue(msg)
		}), freshKey))
		// Warmed up at its own concurrency, so that no round opens connections: interleave
		// warms a variant with an op at the comparison's.
		if _, err := runFor(ctx, pv.inFlight, e.opts.round/4, nil, o); err != nil {
			return fmt.Errorf("warm up %s: %w", name, err)
		}
		names[i] = name
		variants[i] = variant{name: name, run: func(ctx context.Context, _ int) (roundResult, error) {
			lat.reset()
			before := runs.Load()
			res, err := runFor(ctx, pv.inFlight, e.opts.round, nil, o)
			if err != nil {
				return res, err
			}
			if got := runs.Load() - before; got != res.msgs {
				return res, fmt.Errorf("handler ran %d times, want %d", got, res.msgs)
			}
			p50, p99 := lat.quantiles()
			p50s[i], p99s[i] = append(p50s[i], p50), append(p99s[i], p99)
			return res, nil
		}}
	}
	for _, f := range floors {
		names, variants = append(names, f.name), append(variants, f)
	}
	log.Printf("pipeline: %s each way, %d connections", b.delay, pipelineConns)
	results, err := interleave(ctx, pipelineConns, e.opts.rounds, e.opts.round/4, variants)
	if err != nil {
		return err
	}
	at := at{scenario: "pipeline", db: b.db, delay: b.delay, rtt: b.rtt, workers: pipelineConns}
	rep.add(at, names, results, 0)
	for i, name := range names[:len(pipelineVariants)] {
		rep.addDerivedUnit(at, latencyName("p50", name), " ms", p50s[i])
		rep.addDerivedUnit(at, latencyName("p99", name), " ms", p99s[i])
	}
	return nil
}

// latencies collects the time each call of an op took, for one round.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) timed(o op) op {
	return func(ctx context.Context, worker int) error {
		start := time.Now()
		err := o(ctx, worker)
		took := time.Since(start)
		l.mu.Lock()
		l.d = append(l.d, took)
		l.mu.Unlock()
		return err
	}
}

func (l *latencies) reset() {
	l.mu.Lock()
	l.d = l.d[:0]
	l.mu.Unlock()
}

// quantiles returns the 50th and 99th percentile of the round's latencies, in milliseconds.
func (l *latencies) quantiles() (p50, p99 float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0
	}
	ms := make([]float64, len(l.d))
	for i, d := range l.d {
		ms[i] = float64(d) / 1e6
	}
	slices.Sort(ms)
	return quantile(ms, 0.5), quantile(ms, 0.99)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// op processes one message on behalf of worker (0..workers-1).
type op func(ctx context.Context, worker int) error

// roundResult is what one round of one variant measured.
type roundResult struct {
	msgs    int64
	elapsed time.Duration
	allocs  uint64 // heap allocations in this process during the round
	writes  int64  // writes to database sockets: round trips
	// cpu is the CPU time this process and the database servers spent during the round.
	cpu cpuTimes
}

func (r roundResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.msgs) / r.elapsed.Seconds()
}

// variant is one way of doing the work that a comparison measures.
type variant struct {
	name string
	// op, if set, is what run runs for a round's duration; interleave warms it up.
	op op
	// run runs one round at the given concurrency.
	run func(ctx context.Context, workers int) (roundResult, error)
}

// timedVariant runs o with workers goroutines for d per round.
func timedVariant(name string, d time.Duration, o op) variant {
	return variant{name: name, op: o, run: func(ctx context.Context, workers int) (roundResult, error) {
		return runFor(ctx, workers, d, nil, o)
	}}
}

// runFor has workers goroutines call o until d has passed (d > 0) or until stop is closed,
// and returns how many calls completed and how long that took. Allocation and socket-write
// counters are read before and after.
func runFor(ctx context.Context, workers int, d time.Duration, stop <-chan struct{}, o op) (roundResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		count    atomic.Int64
		done     atomic.Bool
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w0 := writes.Load()
	cpu0 := readCPU()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				if err := o(ctx, w); err != nil {
					errOnce.Do(func() { firstErr = err; done.Store(true); cancel() })
					return
				}
				count.Add(1)
			}
		}()
	}
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	} else {
		select {
		case <-stop:
		case <-ctx.Done():
		}
	}
	done.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	cpu1 := readCPU()
	w1 := writes.Load()
	runtime.ReadMemStats(&after)
	if firstErr != nil {
		return roundResult{}, firstErr
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return roundResult{}, err
	}
	return roundResult{
		msgs:    count.Load(),
		elapsed: elapsed,
		allocs:  after.Mallocs - before.Mallocs,
		writes:  w1 - w0,
		cpu:     cpuTimes{self: cpu1.self - cpu0.self, server: cpu1.server - cpu0.server},
	}, nil
}

// interleave warms every variant up, then runs rounds rounds of every variant, in mirrored
// order (A B C, then C B A, ...) so that a drift that is linear in time weighs on every
// variant alike. It returns the results per variant, per round.
func interleave(ctx context.Context, workers, rounds int, warm time.Duration, variants []variant) ([][]roundResult, error) {
	for _, v := range variants {
		if v.op == nil || warm <= 0 {
			continue
		}
		if _, err := runFor(ctx, workers, warm, nil, v.op); err != nil {
			return nil, fmt.Errorf("warm up %s: %w", v.name, err)
		}
	}
	results := make([][]roundResult, len(variants))
	for r := range rounds {
		order := make([]int, len(variants))
		for i := range order {
			order[i] = i
		}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			v := variants[i]
			res, err := v.run(ctx, workers)
			if err != nil {
				return nil, fmt.Errorf("%s, %d workers, round %d: %w", v.name, workers, r+1, err)
			}
			results[i] = append(results[i], res)
		}
	}
	return results, nil
}

// spread is a median with the range and quartiles of a sample.
type spread struct {
	med, min, max float64
	n             int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return spread{med: quantile(s, 0.5), min: s[0], max: s[len(s)-1], n: len(s)}
}

// quantile returns the q-quantile of sorted, interpolating between neighbours.
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (pos-float64(i))*(sorted[i+1]-sorted[i])
}

// ratios returns, per round, rate(a)/rate(b).
func ratios(a, b []roundResult) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i].rate() > 0 {
			out = append(out, a[i].rate()/b[i].rate())
		}
	}
	return out
}

func rates(rs []roundResult) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.rate()
	}
	return out
}

// perMsg returns the total of f over rs divided by the messages of rs.
func perMsg(rs []roundResult, f func(roundResult) float64) float64 {
	var total float64
	var msgs int64
	for _, r := range rs {
		total += f(r)
		msgs += r.msgs
	}
	if msgs == 0 {
		return 0
	}
	return total / float64(msgs)
}

package sqlinbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// A combiner coalesces the requests of deliveries in flight at the same time into
// pipelines, without a goroutine of its own (flat combining): each delivery queues its
// request, then either takes a free lane (one of at most lanes connections sending at
// once) and sends the requests waiting, its own among them, up to batch of them, handing
// each its result; or, with every lane busy, parks until its result arrives or a lane is
// its to take. A lone delivery finds a lane free and goes at once.

// pipelineRequest is one message's statements for a pipeline, and their result.
type pipelineRequest struct {
	ctx        context.Context
	statements []statement
	// row, if set, receives the first row of the one statement (the read of a committed
	// claim).
	row *claimRow

	// The result, written by the delivery that sent the request before it marks it done.
	failed int
	err    error

	// The combiner's, under its mutex: queued while the request waits in pending, done
	// once its result is set. wake has room for one signal: the result, or a lane to take.
	queued, done bool
	wake         chan struct{}
}

func newRequest(ctx context.Context, statements []statement, row *claimRow) *pipelineRequest {
	return &pipelineRequest{ctx: ctx, statements: statements, row: row, wake: make(chan struct{}, 1)}
}

// signal wakes the request's delivery, if no signal waits for it already.
func (r *pipelineRequest) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// combiner coalesces requests into pipelines on connections of type C: a pgx pool's, or a
// database/sql connection for multi-statement requests.
type combiner[C any] struct {
	lanes, batch int
	acquire      func(ctx context.Context) (C, error)
	release      func(C)
	// send sends requests in one pipeline on conn and sets each one's result.
	send func(ctx context.Context, conn C, requests []*pipelineRequest)

	mu      sync.Mutex
	pending []*pipelineRequest // oldest first
	busy    int                // lanes sending
}

func newCombiner[C any](lanes, batch int, acquire func(context.Context) (C, error), release func(C),
	send func(context.Context, C, []*pipelineRequest),
) *combiner[C] {
	return &combiner[C]{lanes: lanes, batch: batch, acquire: acquire, release: release, send: send}
}

// do returns once r has its result.
func (c *combiner[C]) do(r *pipelineRequest) {
	done := r.ctx.Done()
	c.mu.Lock()
	r.queued = true
	c.pending = append(c.pending, r)
	for !r.done {
		if r.queued && c.busy < c.lanes {
			c.busy++
			c.mu.Unlock()
			c.lane(r)
			c.mu.Lock()
			c.busy--
			c.handOff()
			continue
		}
		c.mu.Unlock()
		select {
		case <-r.wake:
		case <-done:
			// A request still waiting goes nowhere; one being sent waits for its result,
			// which the pipeline's own deadline bounds.
			done = nil
			c.mu.Lock()
			if r.queued {
				c.unqueue(r)
				c.finish(r, failedSetup, &storeError{fmt.Errorf("sqlinbox: waiting for a pipeline: %w", context.Cause(r.ctx))})
				c.handOff()
			}
			c.mu.Unlock()
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
}

// lane sends one pipeline: the requests waiting when self's delivery got a connection.
func (c *combiner[C]) lane(self *pipelineRequest) {
	conn, err := c.acquire(self.ctx)
	c.mu.Lock()
	if err != nil {
		// Only self's: the others try for a connection themselves, with their own contexts.
		if self.queued {
			c.unqueue(self)
			c.finish(self, failedSetup, acquireError(err))
		}
		c.mu.Unlock()
		return
	}
	requests := c.take()
	c.mu.Unlock()
	if len(requests) > 0 {
		ctx, cancel := pipelineContext(requests)
		c.send(ctx, conn, requests)
		cancel()
	}
	c.release(conn)
	c.mu.Lock()
	for _, r := range requests {
		r.done = true
		r.signal()
	}
	c.mu.Unlock()
}

// take removes up to batch requests from pending, oldest first, and fails those whose
// context ended while they waited.
func (c *combiner[C]) take() []*pipelineRequest {
	var requests []*pipelineRequest
	n := 0
	for _, r := range c.pending {
		if len(requests) == c.batch {
			c.pending[n] = r
			n++
			continue
		}
		r.queued = false
		if err := context.Cause(r.ctx); err != nil {
			c.finish(r, failedSetup, &storeError{fmt.Errorf("sqlinbox: waiting for a pipeline: %w", err)})
			continue
		}
		requests = append(requests, r)
	}
	clear(c.pending[n:])
	c.pending = c.pending[:n]
	return requests
}

// unqueue removes r from pending.
func (c *combiner[C]) unqueue(r *pipelineRequest) {
	if i := slices.Index(c.pending, r); i >= 0 {
		c.pending = slices.Delete(c.pending, i, i+1)
	}
	r.queued = false
}

// finish gives r a result it got without being sent.
func (c *combiner[C]) finish(r *pipelineRequest, failed int, err error) {
	r.failed, r.err, r.done = failed, err, true
	r.signal()
}

// handOff wakes the oldest waiting request's delivery when a lane is free for it.
func (c *combiner[C]) handOff() {
	if c.busy < c.lanes && len(c.pending) > 0 {
		c.pending[0].signal()
	}
}

// pipelineContext is what a pipeline runs under: detached from the deliveries' contexts,
// which would each cancel the others' messages, and bounded by the latest of their
// deadlines (none if one of them has none).
func pipelineContext(requests []*pipelineRequest) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, r := range requests {
		deadline, ok := r.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(requests[0].ctx))
		}
		if deadline.After(latest) {
			latest = deadline
		}
	}
	return context.WithDeadline(context.WithoutCancel(requests[0].ctx), latest)
}

package sqlinbox

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
)

// The marks are written behind the deliveries, on the pool: a delivery never waits for its
// mark, and one UPDATE carries the marks of markBatch deliveries at most, sent markDelay after
// the first of them (or at once when markBatch are waiting). At a thousand messages a second
// that is one statement per 20 of them. A mark that is lost (the process ends before it is
// written, or its statement fails) only lets the relay or a duplicate publish that record's
// messages once more, under the same UUIDs.
const (
	markDelay   = 20 * time.Millisecond
	markBatch   = 500
	markTimeout = 10 * time.Second
)

// markQueue is a store's marks that wait to be written.
type markQueue struct {
	mu       sync.Mutex
	pending  []inbox.Claim
	writing  bool          // a writer goroutine runs; it stops when nothing waits
	full     chan struct{} // wakes the writer early when markBatch wait
	idle     *sync.Cond    // signalled when the writer stops
	err      error         // the first mark that failed since the last FlushMarks
	flushing int           // callers of FlushMarks waiting: the writer does not wait for more
	// unwritten counts the marks of each claim that are queued or being written: a duplicate
	// of one reads its record as published, which its row does not say yet.
	unwritten map[claimKey]int
}

type claimKey struct{ consumer, key string }

// unwrittenMark reports whether a mark of claim waits to be written.
func (q *markQueue) unwrittenMark(claim inbox.Claim) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unwritten[claimKey{claim.Consumer, claim.Key}] > 0
}

// written forgets the marks of claims, written or failed: a failed one leaves the row
// unpublished, which is what a duplicate then reads.
func (q *markQueue) written(claims []inbox.Claim) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, c := range claims {
		k := claimKey{c.Consumer, c.Key}
		if q.unwritten[k]--; q.unwritten[k] <= 0 {
			delete(q.unwritten, k)
		}
	}
}

var _ inbox.PublishedMarker = (*Store)(nil)

// MarkPublished implements [inbox.PublishedMarker]: the middleware calls it once the messages
// recorded with claim have been published. The store writes the mark later, with others in
// one statement, on its pool; it returns at once. On a table without the column unpublished
// (made before it; see [RelaySQL]) it does nothing.
func (s *Store) MarkPublished(claim inbox.Claim) {
	if !s.marks() {
		return
	}
	q := &s.markQueue
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, claim)
	if q.unwritten == nil {
		q.unwritten = map[claimKey]int{}
	}
	q.unwritten[claimKey{claim.Consumer, claim.Key}]++
	switch {
	case !q.writing:
		q.writing = true
		go s.writeMarks()
	case len(q.pending) >= markBatch:
		select {
		case q.full <- struct{}{}:
		default:
		}
	}
}

// FlushMarks writes the marks that wait now and returns once they are written. It returns the
// first failure since the last FlushMarks, of a mark written now or before (a statement that
// failed on the database's state is retried first, for up to ten seconds). Call it when a
// service stops, after its router: a mark not written lets the relay publish that record's
// messages once more.
func (s *Store) FlushMarks(ctx context.Context) error {
	q := &s.markQueue
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.writing {
		return q.takeErr()
	}
	q.flushing++
	defer func() { q.flushing-- }()
	select {
	case q.full <- struct{}{}:
	default:
	}
	stop := context.AfterFunc(ctx, func() { q.mu.Lock(); q.idle.Broadcast(); q.mu.Unlock() })
	defer stop()
	for q.writing && ctx.Err() == nil {
		q.idle.Wait()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.takeErr()
}

// takeErr returns the first failure since the last call and forgets it; q.mu is held.
func (q *markQueue) takeErr() error {
	err := q.err
	q.err = nil
	return err
}

// writeMarks writes the queue's marks until none wait.
func (s *Store) writeMarks() {
	q := &s.markQueue
	timer := time.NewTimer(markDelay)
	defer timer.Stop()
	for {
		q.mu.Lock()
		wait := q.flushing == 0 && len(q.pending) < markBatch
		q.mu.Unlock()
		if wait {
			select {
			case <-timer.C:
			case <-q.full:
			}
		}
		q.mu.Lock()
		n := min(len(q.pending), markBatch)
		claims := slices.Clone(q.pending[:n])
		q.pending = slices.Delete(q.pending, 0, n)
		q.mu.Unlock()

		err := s.writeMarkBatch(slices.Clone(claims))
		q.written(claims)

		q.mu.Lock()
		if q.err == nil {
			q.err = err
		}
		if len(q.pending) == 0 {
			q.writing = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		timer.Reset(markDelay)
	}
}

// markRetryDelay is the first wait before a mark's statement that failed on the database's
// state (a deadlock with the claims it races, a lock timeout, a connection lost) is sent
// again, doubled each time, until markTimeout.
const markRetryDelay = 10 * time.Millisecond

// writeMarkBatch clears unpublished on claims, in one statement, in the order of their keys,
// so that two stores marking the same records lock them in one order. A statement that fails
// on the database's state is sent again: the marks are idempotent.
func (s *Store) writeMarkBatch(claims []inbox.Claim) error {
	slices.SortFunc(claims, func(a, b inbox.Claim) int {
		return cmp.Or(cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(a.Key, b.Key))
	})
	claims = slices.CompactFunc(claims, func(a, b inbox.Claim) bool { return a.Consumer == b.Consumer && a.Key == b.Key })
	consumers, keys := make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		consumers[i], keys[i] = c.Consumer, c.Key
	}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	query, args := s.sql.relay.Mark(consumers, keys)
	for failures := 1; ; failures++ {
		_, err := s.pool.exec(ctx, query, args...)
		if err == nil {
			return nil
		}
		retry := s.sql.dialect.IsTransient(err) || connectionLost(err)
		if retry && sleepCtx(ctx, backoff(markRetryDelay, markTimeout, failures, randomJitter)) {
			continue
		}
		s.logger.Error("Inbox: writing the published marks failed; the relay publishes those records once more", err,
			watermill.LogFields{"table": s.sql.table.Quoted, "marks": len(claims), "attempts": failures})
		return err
	}
}

// sleepCtx waits d and reports whether ctx is still live then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

package inbox

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// With a [PublishedMarker] store, a committed record is marked published once its messages
// have left, and a duplicate of a marked record publishes nothing again. Between the commit
// and the mark's write there is a window in which a duplicate still reads the record as
// unpublished: the copies of an HTTP request that waited for the first one's commit arrive
// exactly then. Within one process the middleware closes it for what it publishes itself: a
// delivery whose record is leaving is registered until its publish ends, and a duplicate of
// it waits for that end and publishes again only if the publish failed. (The store closes the rest of the window,
// from the mark to its write; a duplicate in another process may still publish once more.)

// leavingSet holds the committed records of this middleware whose messages are being
// published.
type leavingSet struct {
	mu sync.Mutex
	m  map[claimID]*leaving
}

type claimID struct{ consumer, key string }

// leaving is one record being published; done is closed when its publish has ended, and
// published says how.
type leaving struct {
	done      chan struct{}
	published bool
}

// start registers the record of claim as leaving. A record registered already (by the
// delivery that committed it, when this one is a write-behind copy that will find it a
// duplicate) keeps its registration: this one gets its own, which nobody waits for.
func (s *leavingSet) start(claim Claim) *leaving {
	l := &leaving{done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[claimID]*leaving{}
	}
	if _, ok := s.m[claimID{claim.Consumer, claim.Key}]; !ok {
		s.m[claimID{claim.Consumer, claim.Key}] = l
	}
	return l
}

// end says the record's publish ended, published or not.
func (s *leavingSet) end(claim Claim, l *leaving, published bool) {
	s.mu.Lock()
	if s.m[claimID{claim.Consumer, claim.Key}] == l {
		delete(s.m, claimID{claim.Consumer, claim.Key})
	}
	s.mu.Unlock()
	l.published = published
	close(l.done)
}

// leavingWait bounds a duplicate's wait for the publish of its first delivery, a publish
// through a broker that hangs: the duplicate then publishes the record again itself.
const leavingWait = 10 * time.Second

// published waits for the record of claim, if it is leaving, and reports whether its
// publish succeeded; false when it is not leaving, failed, or ctx or leavingWait ended first.
func (s *leavingSet) published(ctx context.Context, claim Claim) bool {
	s.mu.Lock()
	l := s.m[claimID{claim.Consumer, claim.Key}]
	s.mu.Unlock()
	if l == nil {
		return false
	}
	timer := time.NewTimer(leavingWait)
	defer timer.Stop()
	select {
	case <-l.done:
		return l.published
	case <-ctx.Done():
	case <-timer.C:
	}
	return false
}

// startLeaving registers the delivery's record as leaving before its commit, so that a copy
// the commit releases (an HTTP request waiting for it) finds it; nil when the store keeps no
// marks or the record holds no messages.
func (d *delivery) startLeaving(returned []*message.Message, pubs int) *leaving {
	if _, ok := d.m.store.(PublishedMarker); !ok || len(returned)+pubs == 0 {
		return nil
	}
	return d.m.leaving.start(d.claim)
}

// stopLeaving ends l, if any, unpublished: its commit failed or found a duplicate.
func (d *delivery) stopLeaving(l *leaving) {
	if l != nil {
		d.m.leaving.end(d.claim, l, false)
	}
}

// leave publishes what the delivery's committed record holds, through publish, and marks it
// published on a [PublishedMarker] store once it has left: at once when the middleware
// published all of it itself (what the handler sent through a [Publisher]), or when the
// router acks the message, which it does after publishing what the handler returned. A nack
// means the router's publish failed (or a middleware after the inbox failed): the record
// stays unpublished, for the redelivery or the relay. l is the record's registration from
// startLeaving; nil registers it now.
func (d *delivery) leave(l *leaving, returned []*message.Message, pubs int, publish func() error) error {
	if l == nil {
		if l = d.startLeaving(returned, pubs); l == nil {
			return publish()
		}
	}
	marker := d.m.store.(PublishedMarker)
	claim := d.claim
	if err := publish(); err != nil {
		d.m.leaving.end(claim, l, false)
		return err
	}
	if len(returned) == 0 {
		marker.MarkPublished(claim)
		d.m.leaving.end(claim, l, true)
		return nil
	}
	// The router publishes the returned messages after we return: a duplicate does not wait
	// for that (a message handed to the middleware by code that never acks it would keep it
	// waiting) and publishes them again, as it would without marks.
	d.m.leaving.end(claim, l, false)
	acked, nacked := d.msg.Acked(), d.msg.Nacked()
	go func() {
		select {
		case <-acked:
			marker.MarkPublished(claim)
		case <-nacked:
		}
	}()
	return nil
}

package inboxhttp

import (
	"context"
	"sync"
)

// A key is in flight while its first request's claim is open: from its claim to its COMMIT or
// ROLLBACK. Only then is a copy answered 409; a copy of a committed key is a replay, however
// many other copies are being answered. The database decides in the end (a copy from another
// process waits on the claim's row lock); this process's own copies are told at once.

// flight is one request of a key being handled in this process.
type flight struct {
	decided   chan struct{} // closed once the claim is decided: open, or not to be made by this request
	isDecided bool          // decided is closed
	open      bool          // the claim is new and its transaction open, until leave
}

// inFlight holds the flights of this process, by scoped key.
type inFlight struct {
	mu      sync.Mutex
	flights map[string]*flight
}

func newInFlight() *inFlight { return &inFlight{flights: map[string]*flight{}} }

// enter returns the flight of a request of key that no other request of this process is
// handling, for its claim; or nil, with open reporting whether a first request's claim of key
// is open (answer 409), and nil without open when the first one turned out not to hold the
// claim (the key committed, or its claim failed): the request then goes to the database as it
// is. It waits for a first request whose claim is undecided, and returns ctx's error if ctx
// ends first.
func (s *inFlight) enter(ctx context.Context, key string) (f *flight, open bool, err error) {
	s.mu.Lock()
	first := s.flights[key]
	if first == nil {
		f = &flight{decided: make(chan struct{})}
		s.flights[key] = f
		s.mu.Unlock()
		return f, false, nil
	}
	s.mu.Unlock()
	select {
	case <-first.decided:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return nil, first.open && s.flights[key] == first, nil
}

// opened marks f's claim new and open: copies arriving now are answered 409.
func (s *inFlight) opened(f *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.open = true
	f.decide()
}

// leave ends f: its claim is committed, rolled back or was never made. Copies that were
// waiting for it go on to the database.
func (s *inFlight) leave(key string, f *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[key] == f {
		delete(s.flights, key)
	}
	f.decide()
}

// decide closes decided once; the caller holds the lock.
func (f *flight) decide() {
	if !f.isDecided {
		f.isDecided = true
		close(f.decided)
	}
}

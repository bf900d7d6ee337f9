package inboxhttp

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
)

// memStore is an in-memory inbox.Store for the middleware's own logic; the real stores are
// tested against real databases in the integration module.
type memStore struct {
	mu        sync.Mutex
	committed map[[2]string]*inbox.Record
}

type memTx struct {
	s     *memStore
	claim inbox.Claim
}

func (s *memStore) Claim(_ context.Context, c inbox.Claim) (inbox.Tx, *inbox.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prior := s.committed[[2]string{c.Consumer, c.Key}]; prior != nil {
		return nil, prior, nil
	}
	return &memTx{s: s, claim: c}, nil, nil
}

func (t *memTx) Handle() any                    { return t }
func (t *memTx) ExecAtCommit(string, ...any)    {}
func (t *memTx) Rollback(context.Context) error { return nil }
func (t *memTx) Commit(_ context.Context, produced []byte) error {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.committed[[2]string{t.claim.Consumer, t.claim.Key}] = &inbox.Record{Fingerprint: t.claim.Fingerprint, Produced: produced}
	return nil
}

// A response body up to MaxRecordedBody is recorded and replayed whole, whatever
// MaxRecordedBody is: the inbox middleware's bound on a record (inbox.Config.MaxRecorded)
// follows it, so the two bounds never contradict each other.
func TestABodyOfMaxRecordedBodyIsReplayed(t *testing.T) {
	for _, limit := range []int64{DefaultMaxRecordedBody, 6 << 20} {
		body := bytes.Repeat([]byte("b"), int(limit))
		mw, err := NewMiddleware(&memStore{committed: map[[2]string]*inbox.Record{}}, Config{Consumer: "orders", Scope: Unscoped, MaxRecordedBody: limit}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Link", string(bytes.Repeat([]byte("l"), 8<<10)))
			_, _ = w.Write(body)
		}))
		for i, wantReplay := range []string{"", "true"} {
			req := httptest.NewRequest(http.MethodPost, "/orders", nil)
			req.Header.Set(HeaderKey, `"order-1"`)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || rec.Header().Get(HeaderReplayed) != wantReplay || !bytes.Equal(rec.Body.Bytes(), body) ||
				rec.Header().Get(HeaderBodyOmitted) != "" {
				t.Errorf("MaxRecordedBody %d, request %d: status %d, replayed %q, omitted %q, %d bytes of body (want %d)",
					limit, i+1, rec.Code, rec.Header().Get(HeaderReplayed), rec.Header().Get(HeaderBodyOmitted), rec.Body.Len(), len(body))
			}
		}
	}
}

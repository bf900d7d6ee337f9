package integration

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/watermill-inbox/inboxhttp"
)

// A COMMIT that fails (each store's injected commit faults: a deferred constraint, a
// connection killed before COMMIT) is answered with the problem that says whether the request
// was recorded is not known, never with one that says nothing was; the retry finds out and
// creates the order once.
func TestHTTPFailedCommitIsNotSaidUnrecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		faults := slices.Sorted(maps.Keys(b.commitFaults))
		if len(faults) == 0 {
			t.Skip("no commit fault for this store")
		}
		for i, name := range faults {
			t.Run(name, func(t *testing.T) {
				key := "commit-fault-" + string(rune('a'+i))
				orders := &orderHandler{b: b}
				var injected atomic.Bool
				server := endpoint(t, b, inboxhttp.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					orders.ServeHTTP(w, r) // its answer is held until the COMMIT, which the fault fails
					if injected.CompareAndSwap(false, true) {
						if err := b.commitFaults[name](r.Context()); err != nil {
							t.Errorf("injecting %s: %v", name, err)
						}
					}
				}), nil)
				r := post(t, server.Client(), server.URL, key, key, nil)
				if r.status != http.StatusServiceUnavailable && r.status != http.StatusInternalServerError {
					t.Fatalf("%s: %d %s, want 503 or 500", name, r.status, r.body)
				}
				p := problemOf(t, name, r, r.status)
				if !strings.HasSuffix(p.Type, "#commit-unknown") || strings.Contains(p.Title, "nothing of it was recorded") {
					t.Errorf("%s: problem %q %q, want the commit's outcome said unknown", name, p.Type, p.Title)
				}
				createdOnRetry(t, server, b, key)
			})
		}
	})
}

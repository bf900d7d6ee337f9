package inboxhttp

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
)

// NewMiddleware refuses an endpoint without a Scope, whose clients would share one key space
// unless it says so with Unscoped.
func TestScopeIsRequired(t *testing.T) {
	store := &memStore{committed: map[[2]string]*inbox.Record{}}
	if _, err := NewMiddleware(store, Config{Consumer: "billing"}, nil); err == nil || !strings.Contains(err.Error(), "Config.Scope is required") {
		t.Errorf("NewMiddleware without Scope: %v, want it refused", err)
	}
	if _, err := NewMiddleware(store, Config{Consumer: "billing", Scope: Unscoped}, nil); err != nil {
		t.Errorf("NewMiddleware with Unscoped: %v", err)
	}
}

// Set-Cookie would hand the first client's session to whoever retries, and Date is the
// replay's own: a ReplayHeaders naming either, in any case, or a header of the connection, is
// refused at construction rather than dropped silently.
func TestReplayHeadersNeverNameSetCookieOrDate(t *testing.T) {
	store := &memStore{committed: map[[2]string]*inbox.Record{}}
	for _, name := range []string{"Set-Cookie", "set-cookie", "DATE", "Content-Length", "Transfer-Encoding", HeaderReplayed} {
		_, err := NewMiddleware(store, Config{Consumer: "billing", Scope: Unscoped, ReplayHeaders: []string{"X-Cost", name}}, nil)
		if err == nil || !strings.Contains(err.Error(), "never replayed") {
			t.Errorf("ReplayHeaders naming %q: %v, want it refused", name, err)
		}
	}
}

// Two (scope, key) pairs never give one claim key, however their bytes split, and a claim key
// fits the table whatever their lengths.
func TestScopedKeyKeepsScopesApart(t *testing.T) {
	pairs := [][2]string{{"a", "bc"}, {"ab", "c"}, {"", "abc"}, {"abc", ""}, {"1:a", "b"}, {"1", ":ab"},
		{"tenant-a", "order-1"}, {"tenant-A", "order-1"}, {"tenant-a ", "order-1"}, {strings.Repeat("s", 1000), strings.Repeat("k", 255)}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := ScopedKey(p[0], p[1])
		if other, ok := seen[k]; ok {
			t.Errorf("ScopedKey(%q, %q) = ScopedKey(%q, %q)", p[0], p[1], other[0], other[1])
		}
		seen[k] = p
		if len(k) != 64 || len(k) > inbox.MaxKeyLength {
			t.Errorf("ScopedKey(%q…) is %d bytes", p[0][:min(len(p[0]), 8)], len(k))
		}
	}
}

// Retry-After counts whole seconds: a RetryAfter between them is rounded up, never to 0.
func TestRetryAfterIsWholeSecondsRoundedUp(t *testing.T) {
	for d, want := range map[time.Duration]int{DefaultRetryAfter: 1, 1500 * time.Millisecond: 2, time.Millisecond: 1, 30 * time.Second: 30} {
		if got := (Config{RetryAfter: d}).retryAfterSeconds(); got != want {
			t.Errorf("RetryAfter %v: Retry-After %d, want %d", d, got, want)
		}
	}
}

// The default fingerprint tells requests apart by method, path, query string and body, each
// delimited, so that moving bytes from one to the next changes it.
func TestRequestSHA256(t *testing.T) {
	base := RequestSHA256(httptest.NewRequest("POST", "/orders?a=1", nil), []byte("body"))
	for _, c := range []struct {
		method, target, body string
	}{{"PUT", "/orders?a=1", "body"}, {"POST", "/orders?a=2", "body"}, {"POST", "/orders", "body"},
		{"POST", "/orders?a=1", "other"}, {"POST", "/order?sa=1", "body"}, {"POST", "/orders?a=1b", "ody"}} {
		if got := RequestSHA256(httptest.NewRequest(c.method, c.target, nil), []byte(c.body)); bytes.Equal(got, base) {
			t.Errorf("%s %s %q has the fingerprint of POST /orders?a=1 \"body\"", c.method, c.target, c.body)
		}
	}
	if again := RequestSHA256(httptest.NewRequest("POST", "/orders?a=1", nil), []byte("body")); !bytes.Equal(again, base) {
		t.Error("the same request fingerprints differently")
	}
}

// The endpoint logs its consumer once, as an HTTP endpoint's, and no line about a router
// handler, which a request does not come through.
func TestEndpointLogsItsConsumerAsAnHTTPEndpoint(t *testing.T) {
	logger := watermill.NewCaptureLogger()
	mw, err := NewMiddleware(&memStore{committed: map[[2]string]*inbox.Record{}}, Config{Consumer: "billing", Scope: Unscoped}, logger)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	req := httptest.NewRequest(http.MethodPost, "/orders", nil)
	req.Header.Set(HeaderKey, `"k"`)
	h.ServeHTTP(httptest.NewRecorder(), req)
	var lines []string
	for _, m := range logger.Captured()[watermill.InfoLogLevel] {
		lines = append(lines, fmt.Sprintf("%s %v", m.Msg, m.Fields))
	}
	want := fmt.Sprintf("inbox: middleware claims under its consumer %v",
		watermill.LogFields{"consumer": "billing", "write_behind": false, "entry_point": "http"})
	if !slices.Equal(lines, []string{want}) {
		t.Errorf("info lines %q, want only %q", lines, want)
	}
}

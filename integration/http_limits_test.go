package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// endpoint serves handler behind inboxhttp on b with config (its Consumer "billing" and Scope
// Unscoped unless set), logging to logger (nil: nowhere), until the test ends.
func endpoint(t *testing.T, b *backend, config inboxhttp.Config, handler http.Handler, logger watermill.LoggerAdapter) *httptest.Server {
	t.Helper()
	if config.Consumer == "" {
		config.Consumer = "billing"
	}
	if config.Scope == nil {
		config.Scope = inboxhttp.Unscoped
	}
	mw, err := inboxhttp.NewMiddleware(b.store, config, logger)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(mw(handler))
	t.Cleanup(server.Close)
	return server
}

// problemOf decodes a problem body, failing t unless it is one of status.
func problemOf(t *testing.T, what string, r httpReply, status int) (p struct{ Type, Title, Detail string }) {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(r.body, &p) != nil {
		t.Errorf("%s: %d %q %s, want a %d problem", what, r.status, r.header.Get("Content-Type"), r.body, status)
	}
	return p
}

// A body over MaxRequestBody is a 413 problem before any claim: the handler does not run and
// the key stays free, so the same key with a body the endpoint reads is a new order. A body of
// exactly the bound is read whole, by default too.
func TestHTTPBodyOverMaxRequestBodyIs413(t *testing.T) {
	b := backends["pgx/postgres"](t)
	for _, c := range []struct {
		name  string
		limit int64
	}{{"MaxRequestBody 64", 64}, {"the default", inboxhttp.DefaultMaxRequestBody}} {
		t.Run(c.name, func(t *testing.T) {
			h := &orderHandler{b: b}
			server := endpoint(t, b, inboxhttp.Config{MaxRequestBody: c.limit}, h, nil)
			key := strings.ReplaceAll(c.name, " ", "-")
			r := post(t, server.Client(), server.URL, key, key, bytes.Repeat([]byte("x"), int(c.limit)+1))
			if p := problemOf(t, "a body 1 byte over", r, http.StatusRequestEntityTooLarge); !strings.HasSuffix(p.Type, "#request-too-large") {
				t.Errorf("a body 1 byte over: problem type %q", p.Type)
			}
			if n := h.runs.Load(); n != 0 {
				t.Errorf("the handler ran %d times for a body over the bound", n)
			}
			wantRows(t, "claims after the 413", b.claims(t, "billing", inboxhttp.ScopedKey("", key)), 0)
			if r := post(t, server.Client(), server.URL, key, key, bytes.Repeat([]byte("x"), int(c.limit))); r.status != http.StatusCreated || r.replayed {
				t.Errorf("a body of the bound under the same key: %d, replayed %v, want a new 201", r.status, r.replayed)
			}
		})
	}
}

// What a replay sends of the handler's headers: those named in ReplayHeaders (in any case),
// Vary with the Cache-Control it qualifies, never another header of the handler's own, never
// Set-Cookie, and never the first answer's Date: the replay has its own. NewMiddleware refuses
// a ReplayHeaders that names Set-Cookie or Date (TestReplayHeadersNeverNameSetCookieOrDate).
func TestHTTPReplayHeaders(t *testing.T) {
	b := backends["pgx/postgres"](t)
	const firstDate = "Mon, 02 Jan 2006 15:04:05 GMT"
	server := endpoint(t, b, inboxhttp.Config{ReplayHeaders: []string{"x-request-cost"}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("X-Request-Cost", "7")
			h.Set("X-Trace", "not replayed")
			h.Set("Set-Cookie", "session=first-client")
			h.Set("Date", firstDate)
			h.Set("Cache-Control", "public, max-age=60")
			h.Set("Vary", "Authorization")
			w.WriteHeader(http.StatusCreated)
		}), nil)
	first := post(t, server.Client(), server.URL, "k", "k", nil)
	if first.header.Get("Date") != firstDate || first.header.Get("Set-Cookie") == "" || first.header.Get("X-Trace") == "" {
		t.Fatalf("the first answer's headers %v, want the handler's own", first.header)
	}
	replay := post(t, server.Client(), server.URL, "k", "k", nil)
	if !replay.replayed {
		t.Fatalf("the second answer is not a replay: %d %v", replay.status, replay.header)
	}
	for name, want := range map[string]string{"X-Request-Cost": "7", "Cache-Control": "public, max-age=60", "Vary": "Authorization",
		"X-Trace": "", "Set-Cookie": ""} {
		if got := replay.header.Get(name); got != want {
			t.Errorf("the replay's %s: %q, want %q", name, got, want)
		}
	}
	if got := replay.header.Get("Date"); got == firstDate || got == "" {
		t.Errorf("the replay's Date %q: want the replay's own, not the first answer's", got)
	}
}

// The query string is part of the default fingerprint: a used key with another query string
// is another request (422), and the same query string again is a retry (the replay).
func TestHTTPQueryStringIsFingerprinted(t *testing.T) {
	b := backends["pgx/postgres"](t)
	h := &orderHandler{b: b}
	server := endpoint(t, b, inboxhttp.Config{}, h, nil)
	if r := post(t, server.Client(), server.URL+"/orders", "q", "q", nil); r.status != http.StatusCreated {
		t.Fatalf("the first request: %d %s", r.status, r.body)
	}
	r := post(t, server.Client(), server.URL+"/orders?coupon=FREE", "q", "q", nil)
	if p := problemOf(t, "the key with another query string", r, http.StatusUnprocessableEntity); !strings.HasSuffix(p.Type, "#key-reused") {
		t.Errorf("the key with another query string: problem type %q", p.Type)
	}
	if r := post(t, server.Client(), server.URL+"/orders", "q", "q", nil); r.status != http.StatusCreated || !r.replayed {
		t.Errorf("the first request again: %d, replayed %v", r.status, r.replayed)
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("%d handler runs, want 1", n)
	}
}

// A store whose table does not exist: a request is a 503 with Retry-After whose detail is the
// table check's message, the one the broker path returns, not a database said to be away; the
// handler does not run.
func TestHTTPMissingTableIsAnsweredWithTheTableCheck(t *testing.T) {
	for _, name := range []string{"database-sql/sqlite", "pgx/postgres", "database-sql/mariadb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backends[name](t)
			table := testenv.Name("inbox_typo")
			store, err := b.newStore(sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.direct.exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
			b.store = store
			h := &orderHandler{b: b}
			server := endpoint(t, b, inboxhttp.Config{}, h, nil)
			r := post(t, server.Client(), server.URL, "k", "k", nil)
			p := problemOf(t, "a request on a missing table", r, http.StatusServiceUnavailable)
			if !strings.HasPrefix(p.Detail, "sqlinbox: table ") || !strings.Contains(p.Detail, "it does not exist") ||
				r.header.Get("Retry-After") != "1" {
				t.Errorf("a request on a missing table: detail %q, Retry-After %q; want the table check's message and 1",
					p.Detail, r.header.Get("Retry-After"))
			}
			if n := h.runs.Load(); n != 0 {
				t.Errorf("the handler ran %d times", n)
			}
		})
	}
}

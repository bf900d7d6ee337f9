package integration

import (
	"bytes"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// httpStores are the stores an endpoint runs on: every backend, and the pipelined store.
var httpStores = map[string]newBackend{
	"pgx/postgres":                          pgxBackend,
	"pgx-pipeline/postgres":                 func(t *testing.T) *backend { return pipelineBackend(t, sqlinbox.PipelineConfig{}) },
	"database-sql/postgres":                 stdlibPostgresBackend,
	"database-sql/mariadb":                  mysqlBackend,
	"database-sql/mariadb/multi-statements": backends["database-sql/mariadb/multi-statements"],
	"database-sql/sqlite":                   sqliteBackend,
}

// oneRequestStores send a write-behind claim, its writes and COMMIT as one request.
var oneRequestStores = []string{"pgx/postgres", "pgx-pipeline/postgres", "database-sql/mariadb/multi-statements"}

// forEachHTTPMode runs test on every store named in names, claim-first, and write-behind where
// the store sends it as one request.
func forEachHTTPMode(t *testing.T, names []string, test func(t *testing.T, b *backend, writeBehind bool)) {
	slices.Sort(names)
	for _, name := range names {
		for _, writeBehind := range []bool{false, true} {
			if writeBehind && !slices.Contains(oneRequestStores, name) {
				continue
			}
			mode := map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind]
			t.Run(name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				test(t, httpStores[name](t), writeBehind)
			})
		}
	}
}

// customers maps the scope tests' credentials to the customer each authenticates.
var customers = map[string]string{"Bearer token-a": "tenant-a", "Bearer token-b": "tenant-b", "Bearer token-c": "tenant-c"}

// customerOf is the endpoint's Config.Scope as the docs show it: the customer the request's
// credentials authenticate.
func customerOf(r *http.Request) (string, error) {
	customer, ok := customers[r.Header.Get("Authorization")]
	if !ok {
		return "", errors.New("unknown credentials")
	}
	return customer, nil
}

// Two customers send one Idempotency-Key, on every store: the second, sent while the first's
// handler still runs (after it, on SQLite, which has one writer), is neither refused (409) nor kept waiting for it, runs and gets its own
// order; each retry replays its own customer's answer; a third customer's other body under the
// key is its own new order, not a 422; unknown credentials are a 403 problem with no run.
func TestHTTPKeysAreScopedPerClient(t *testing.T) {
	forEachHTTPMode(t, slices.Collect(maps.Keys(httpStores)), func(t *testing.T, b *backend, writeBehind bool) {
		orders := &orderHandler{b: b}
		holding, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer token-a" && r.Header.Get("X-Hold") == "yes" {
				close(holding)
				<-release
			}
			orders.ServeHTTP(w, r)
		})
		mw, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: "billing", Scope: customerOf, RequireKey: true,
			WriteBehind: writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		server := httptest.NewServer(mw(held))
		t.Cleanup(server.Close)
		// A request kept waiting by another customer's claim fails the test within seconds.
		client := &http.Client{Timeout: 10 * time.Second}
		// as sends the key as the client of token; hold keeps tenant-a's handler until release.
		as := func(token, order string, body []byte, hold ...bool) httpReply {
			t.Helper()
			header := http.Header{"Authorization": {token}}
			if len(hold) > 0 && hold[0] {
				header.Set("X-Hold", "yes")
			}
			r, err := sendWith(client, server.URL+"/orders", "order-1", order, body, header)
			if err != nil {
				t.Errorf("%s: %v", token, err)
			}
			return r
		}
		body := []byte(`{"order":"order-1"}`)

		// SQLite has one writer for the whole database: there tenant-b's request would wait for
		// tenant-a's transaction whatever the keys, so they go one after the other.
		concurrent := b.dialect.Name() != (sqlinbox.SQLite{}).Name()
		firstA := make(chan httpReply, 1)
		go func() { firstA <- as("Bearer token-a", "tenant-a", body, concurrent) }()
		if concurrent {
			<-holding
		} else {
			firstA <- <-firstA
		}
		b1 := as("Bearer token-b", "tenant-b", body)
		once.Do(func() { close(release) })
		a1 := <-firstA
		for _, r := range []struct {
			who   string
			reply httpReply
		}{{"tenant-a", a1}, {"tenant-b", b1}} {
			if r.reply.status != http.StatusCreated || r.reply.replayed || !strings.Contains(string(r.reply.body), `"order":"`+r.who+`"`) {
				t.Errorf("%s's first request: %d, replayed %v: %s; want its own 201", r.who, r.reply.status, r.reply.replayed, r.reply.body)
			}
		}
		if bytes.Equal(a1.body, b1.body) {
			t.Errorf("both customers got the same answer %s: one was the other's", a1.body)
		}
		if a2 := as("Bearer token-a", "tenant-a", body); a2.status != http.StatusCreated || !a2.replayed || !bytes.Equal(a2.body, a1.body) {
			t.Errorf("tenant-a's retry: %d, replayed %v: %s; want its own %s replayed", a2.status, a2.replayed, a2.body, a1.body)
		}
		if b2 := as("Bearer token-b", "tenant-b", body); b2.status != http.StatusCreated || !b2.replayed || !bytes.Equal(b2.body, b1.body) {
			t.Errorf("tenant-b's retry: %d, replayed %v: %s; want its own %s replayed", b2.status, b2.replayed, b2.body, b1.body)
		}
		other := []byte(`{"order":"order-1","amount":9}`)
		if c1 := as("Bearer token-c", "tenant-c", other); c1.status != http.StatusCreated || c1.replayed {
			t.Errorf("tenant-c's other body under the key: %d, replayed %v: %s; want its own 201", c1.status, c1.replayed, c1.body)
		}
		runs := orders.runs.Load()
		if r := as("Bearer unknown", "nobody", body); r.status != http.StatusForbidden || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(r.body), "unknown credentials") {
			t.Errorf("unknown credentials: %d %s, want a 403 problem naming the scope's error", r.status, r.body)
		}
		if orders.runs.Load() != runs {
			t.Error("the handler ran for a request without a scope")
		}
		for _, customer := range []string{"tenant-a", "tenant-b", "tenant-c"} {
			wantRows(t, customer+"'s business rows", b.invoices(t, "billing", customer), 1)
			wantRows(t, customer+"'s claims", b.claims(t, "billing", inboxhttp.ScopedKey(customer, "order-1")), 1)
		}
		wantRows(t, "claims of the key unscoped", b.claims(t, "billing", "order-1"), 0)
	})
}

package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// orderHandler is an HTTP endpoint that creates an order: it writes one business row
// through the inbox transaction and answers 201 with a body holding a nonce of its own run,
// so that a replay can be told from a second run. failures and panics name the keys whose
// first run answers 500 or panics.
type orderHandler struct {
	b                *backend
	failures, panics sync.Map // key -> struct{}: the first run fails
	runs             atomic.Int64
}

func (h *orderHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	ctx := r.Context()
	key := r.Header.Get("X-Order")
	insert := "INSERT INTO " + h.b.business + " (consumer, msg_key) VALUES (?, ?)"
	var err error
	if tx, ok := h.b.inTx(ctx); ok {
		err = tx.exec(ctx, insert, "billing", key)
	} else { // write-behind mode: no transaction yet
		err = inbox.ExecAtCommit(ctx, h.b.placeholders(insert), "billing", key)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, first := h.failures.LoadAndDelete(key); first {
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	}
	if _, first := h.panics.LoadAndDelete(key); first {
		panic("injected panic")
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+key)
	w.Header().Set("Set-Cookie", "session=never-replayed")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"order": key, "run": hex.EncodeToString(nonce)})
}

// httpReply is what a client got.
type httpReply struct {
	status   int
	body     []byte
	replayed bool
	header   http.Header
}

// post sends a request and fails t if it gets no answer.
func post(t *testing.T, client *http.Client, url, key, order string, body []byte) httpReply {
	t.Helper()
	r, err := send(client, url, key, order, body)
	if err != nil {
		t.Errorf("POST %s: %v", key, err)
	}
	return r
}

// send sends a request with the key (none if "") and the order's header, and reads the answer.
func send(client *http.Client, url, key, order string, body []byte) (httpReply, error) {
	return sendWith(client, url, key, order, body, nil)
}

// sendWith is send with the headers of header added.
func sendWith(client *http.Client, url, key, order string, body []byte, header http.Header) (httpReply, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return httpReply{}, err
	}
	for name, values := range header {
		req.Header[name] = values
	}
	if key != "" {
		req.Header.Set(inboxhttp.HeaderKey, `"`+key+`"`)
	}
	req.Header.Set("X-Order", order)
	resp, err := client.Do(req)
	if err != nil {
		return httpReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpReply{status: resp.StatusCode, body: b, replayed: resp.Header.Get(inboxhttp.HeaderReplayed) == "true", header: resp.Header}, err
}

// 500 requests, each sent 1 to 3 times, some copies at once, with a 500 from the handler on
// 25 first runs and a panic on 25 more, through a real server and client on every store:
// exactly one business row per key; every 201 for a key is byte for byte the same (the
// replays among them marked, and without Set-Cookie); copies at once get 409 or the replay;
// the same key with another body is a 422; a request without the key is a 400.
func TestHTTPIdempotencyKeyStorm(t *testing.T) {
	t.Parallel()
	for _, name := range sortedBackends() {
		for _, writeBehind := range []bool{false, true} {
			if writeBehind && !strings.HasPrefix(name, "pgx") && !strings.Contains(name, "multi-statements") {
				continue // one round trip only where the store sends one request
			}
			mode := map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind]
			t.Run(name+"/"+mode, func(t *testing.T) { httpStorm(t, name, writeBehind) })
		}
	}
}

func httpStorm(t *testing.T, name string, writeBehind bool) {
	t.Parallel()
	b := backends[name](t)
	h := &orderHandler{b: b}
	mw, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: "billing", Scope: inboxhttp.Unscoped, RequireKey: true, WriteBehind: writeBehind}, nil)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(mw(h))
	t.Cleanup(server.Close)
	client := server.Client()
	url := server.URL + "/orders"

	const orders = 500
	keys := make([]string, orders)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", strings.ReplaceAll(name, "/", "-"), i)
		switch i % 20 {
		case 3:
			h.failures.Store(keys[i], struct{}{})
		case 7:
			h.panics.Store(keys[i], struct{}{})
		}
	}
	var mu sync.Mutex
	created := map[string][]httpReply{}
	var conflicts, serverErrors atomic.Int64
	// send sends a copy until it is answered with a 201 or a 409, as a client retries.
	send := func(i int) {
		key := keys[i]
		body := []byte(`{"order":"` + key + `"}`)
		for attempt := 0; ; attempt++ {
			if attempt == 20 {
				t.Errorf("%s: no answer but 5xx after 20 attempts", key)
				return
			}
			r := post(t, client, url, key, key, body)
			switch {
			case r.status == http.StatusCreated:
				mu.Lock()
				created[key] = append(created[key], r)
				mu.Unlock()
				return
			case r.status == http.StatusConflict:
				conflicts.Add(1)
				return
			case r.status >= 500:
				serverErrors.Add(1)
				continue
			default:
				t.Errorf("%s: status %d: %s", key, r.status, r.body)
				return
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range keys {
		copies := 1 + i%3
		for c := 0; c < copies; c++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer wg.Done(); defer func() { <-sem }(); send(i) }()
		}
	}
	wg.Wait()

	for _, key := range keys {
		// A copy answered 409 retries, later, and gets the replay.
		r := post(t, client, url, key, key, []byte(`{"order":"`+key+`"}`))
		if r.status != http.StatusCreated || !r.replayed {
			t.Errorf("%s: the retry after the first answer: status %d, replayed %v: %s", key, r.status, r.replayed, r.body)
			continue
		}
		if r.header.Get("Set-Cookie") != "" || r.header.Get("Location") != "/orders/"+key {
			t.Errorf("%s: replayed headers %v", key, r.header)
		}
		replies := append(created[key], r)
		for _, other := range replies[1:] {
			if !bytes.Equal(other.body, replies[0].body) {
				t.Errorf("%s: two answers differ: %s and %s", key, replies[0].body, other.body)
				break
			}
		}
		if n := b.invoices(t, "billing", key); n != 1 {
			t.Errorf("%s: %d business rows, want 1", key, n)
		}
	}
	if n := b.rows(t, b.business, ""); n != orders {
		t.Errorf("%d business rows in all, want %d", n, orders)
	}
	if serverErrors.Load() < 50 {
		t.Errorf("%d server errors, want at least the 50 injected", serverErrors.Load())
	}

	// The same key with another request, and a request without a key.
	r := post(t, client, url, keys[0], keys[0], []byte(`{"order":"another"}`))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "key-reused") {
		t.Errorf("another body under a used key: %d %s, want 422 with the problem", r.status, r.body)
	}
	r = post(t, client, url, "", "no-key", nil)
	var p struct {
		Status int    `json:"status"`
		Type   string `json:"type"`
	}
	if r.status != http.StatusBadRequest || json.Unmarshal(r.body, &p) != nil || p.Status != 400 ||
		r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("no key: %d %q %s, want a 400 problem", r.status, r.header.Get("Content-Type"), r.body)
	}
	if n := b.invoices(t, "billing", "no-key"); n != 0 {
		t.Errorf("the request without a key wrote %d rows", n)
	}
	t.Logf("%d handler runs for %d orders; %d answers 409, %d server errors retried",
		h.runs.Load(), orders, conflicts.Load(), serverErrors.Load())
}

// 200 keys, each sent by 8 clients at once that retry a 409 after a short back-off until they
// are answered 201, on the stores where claims race hardest: no request sent after a client
// got its key's 201 (so after the key's commit) is answered 409, whatever the other copies
// are doing; every key has one business row and one claim, and every 201 of a key is byte for
// byte the first.
func TestHTTPRetryStormConflictsOnlyBeforeCommit(t *testing.T) {
	t.Parallel()
	names := []string{"pgx/postgres", "pgx-pipeline/postgres", "database-sql/mariadb", "database-sql/mariadb/multi-statements"}
	forEachHTTPMode(t, names, func(t *testing.T, b *backend, writeBehind bool) {
		h := &orderHandler{b: b}
		server := endpoint(t, b, inboxhttp.Config{RequireKey: true, WriteBehind: writeBehind}, h, nil)
		client := server.Client()

		const keys, clients = 200, 8
		type answer struct {
			status         int
			sent, received time.Time
			body           []byte
		}
		answers := make([][]answer, keys)
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16) // keys at once
		for i := range keys {
			key := fmt.Sprintf("storm-%03d", i)
			body := []byte(`{"order":"` + key + `"}`)
			sem <- struct{}{}
			var keyWG sync.WaitGroup
			for range clients {
				keyWG.Go(func() {
					for attempt := 0; attempt < 500; attempt++ {
						sent := time.Now()
						r, err := send(client, server.URL+"/orders", key, key, body)
						a := answer{status: r.status, sent: sent, received: time.Now(), body: r.body}
						if err != nil {
							t.Errorf("%s: %v", key, err)
							return
						}
						mu.Lock()
						answers[i] = append(answers[i], a)
						mu.Unlock()
						switch {
						case r.status == http.StatusCreated:
							return
						case r.status == http.StatusConflict || r.status >= 500:
							time.Sleep(time.Millisecond) // a client's back-off, not a synchronisation
						default:
							t.Errorf("%s: status %d: %s", key, r.status, r.body)
							return
						}
					}
					t.Errorf("%s: no 201 after 500 attempts", key)
				})
			}
			wg.Go(func() { keyWG.Wait(); <-sem })
		}
		wg.Wait()

		var conflicts, late int
		for i, got := range answers {
			key := fmt.Sprintf("storm-%03d", i)
			var first *answer
			for j := range got {
				if got[j].status == http.StatusCreated && (first == nil || got[j].received.Before(first.received)) {
					first = &got[j]
				}
			}
			if first == nil {
				t.Errorf("%s: never created", key)
				continue
			}
			for _, a := range got {
				switch {
				case a.status == http.StatusConflict && a.sent.After(first.received):
					late++
				case a.status == http.StatusConflict:
					conflicts++
				case a.status == http.StatusCreated && !bytes.Equal(a.body, first.body):
					t.Errorf("%s: two answers differ: %s and %s", key, first.body, a.body)
				}
			}
			if n := b.invoices(t, "billing", key); n != 1 {
				t.Errorf("%s: %d business rows, want 1", key, n)
			}
			if n := b.claims(t, "billing", inboxhttp.ScopedKey("", key)); n != 1 {
				t.Errorf("%s: %d claims, want 1", key, n)
			}
		}
		if late != 0 {
			t.Errorf("%d requests sent after their key's first 201 had reached a client were answered 409, want 0", late)
		}
		t.Logf("%d keys × %d clients: %d handler runs, %d answers 409 while the first request's claim was open, %d after its commit",
			keys, clients, h.runs.Load(), conflicts, late)
	})
}

// Copies of one request sent at once to one server: one runs, the others get 409 at once or,
// once it has committed, its replay; never a second run. A copy that is not answered at once
// (one waiting on the first's row lock) fails the test within seconds.
func TestHTTPConcurrentCopiesAreOneRequest(t *testing.T) {
	b := backends["pgx/postgres"](t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		tx, _ := b.inTx(r.Context())
		if err := tx.exec(r.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", "once"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw, err := inboxhttp.NewMiddleware(b.store, inboxhttp.Config{Consumer: "billing", Scope: inboxhttp.Unscoped}, nil)
	if err != nil {
		t.Fatal(err)
	}
	server := httptest.NewServer(mw(h))
	t.Cleanup(server.Close)
	t.Cleanup(unblock) // before the server closes, which waits for the first request
	first := make(chan httpReply, 1)
	go func() { first <- post(t, server.Client(), server.URL, "once", "once", nil) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request did not reach the handler")
	}
	copies := &http.Client{Timeout: 5 * time.Second}
	for range 5 {
		r, err := send(copies, server.URL, "once", "once", nil)
		if err != nil {
			t.Fatalf("a copy while the first runs: %v, want 409 at once", err)
		}
		if r.status != http.StatusConflict || r.header.Get("Retry-After") != "1" {
			t.Errorf("a copy while the first runs: %d %s, want 409 with Retry-After: 1", r.status, r.body)
		}
	}
	unblock()
	if r := <-first; r.status != http.StatusCreated || r.replayed {
		t.Fatalf("the first: %d, replayed %v", r.status, r.replayed)
	}
	if r := post(t, server.Client(), server.URL, "once", "once", nil); r.status != http.StatusCreated || !r.replayed {
		t.Errorf("a copy after the first: %d, replayed %v", r.status, r.replayed)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
	wantRows(t, "business rows", b.invoices(t, "billing", "once"), 1)
}

// orderServer serves an orderHandler on b behind inboxhttp (consumer billing), logging to
// logger (nil: nowhere), until the test ends, and checks that a first order is created.
func orderServer(t *testing.T, b *backend, logger watermill.LoggerAdapter) (*orderHandler, *httptest.Server) {
	t.Helper()
	h := &orderHandler{b: b}
	server := endpoint(t, b, inboxhttp.Config{}, h, logger)
	if r := post(t, server.Client(), server.URL, "before", "before", nil); r.status != http.StatusCreated {
		t.Fatalf("the first order: %d %s", r.status, r.body)
	}
	return h, server
}

// createdOnRetry sends the request of key, as a client retries it after a 503, until it is
// created (30 s at most), and checks it left one business row and one claim.
func createdOnRetry(t *testing.T, server *httptest.Server, b *backend, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := post(t, server.Client(), server.URL, key, key, nil)
		if r.status == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the outage: still %d %s", key, r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond) // a client's back-off, not a synchronisation
	}
	wantRows(t, key+" business rows", b.invoices(t, "billing", key), 1)
	wantRows(t, key+" claims", b.claims(t, "billing", inboxhttp.ScopedKey("", key)), 1)
}

// The database really stopped: a PostgreSQL of the test's own shut down at once (as
// pg_ctl stop -m immediate does) for 5 s while requests arrive, the store connecting to it
// directly, so that it meets the refused connection itself. Each request gets 503 with
// Retry-After, naming neither the database's address nor its user, and the handler never runs;
// the refusal is among the errors logged; none is
// recorded as done; once the server is back each succeeds on its retry, with one business row
// and one claim.
func TestHTTPDatabaseStopped(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	b := pgxBackendOn(t, srv.URL(), srv.URL())
	direct, err := sqlinbox.NewPgx(openPgxPool(t, srv.URL()), sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	b.store = direct // not through the proxy, which would close the connection it cannot dial
	logger := watermill.NewCaptureLogger()
	h, server := orderServer(t, b, logger)
	runsBefore := h.runs.Load()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var during []string
	for i := 0; time.Since(stopped) < 5*time.Second; i++ {
		key := fmt.Sprintf("stopped-%d", i)
		during = append(during, key)
		r := post(t, server.Client(), server.URL, key, key, nil)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("%s with the database stopped: %d %s, want 503 with Retry-After", key, r.status, r.body)
		}
		if strings.Contains(string(r.body), "127.0.0.1") || strings.Contains(string(r.body), "postgres") {
			t.Errorf("%s: the problem names the database's address or user: %s", key, r.body)
		}
		time.Sleep(100 * time.Millisecond) // the pace of the requests, not a synchronisation
	}
	if ran := h.runs.Load() - runsBefore; ran != 0 {
		t.Errorf("the handler ran %d times with the database stopped, want 0", ran)
	}
	refused := 0
	for _, m := range logger.Captured()[watermill.ErrorLogLevel] {
		if errors.Is(m.Err, syscall.ECONNREFUSED) {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no request met the refused connection: the store did not dial the stopped server")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	for _, key := range during {
		wantRows(t, key+" claims before its retry", b.claims(t, "billing", inboxhttp.ScopedKey("", key)), 0)
	}
	for _, key := range during {
		createdOnRetry(t, server, b, key)
	}
	t.Logf("%d requests refused with 503 while the database was stopped; all %d created %v after its restart",
		len(during), len(during), time.Since(restarted).Round(time.Millisecond))
}

// The database away for a while (the store's connections cut, new ones refused): requests
// get 503 with Retry-After and nothing is recorded; once it is back, each retry runs once.
func TestHTTPDatabaseOutage(t *testing.T) {
	for _, name := range []string{"pgx/postgres", "database-sql/mariadb"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := backends[name](t)
			_, server := orderServer(t, b, nil)
			restore := b.outage()
			for i := range 20 {
				key := fmt.Sprintf("during-%d", i)
				r := post(t, server.Client(), server.URL, key, key, nil)
				if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
					t.Errorf("%s during the outage: %d %s, want 503 with Retry-After", key, r.status, r.body)
				}
			}
			restore()
			for i := range 20 {
				createdOnRetry(t, server, b, fmt.Sprintf("during-%d", i))
			}
		})
	}
}

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// httpServerVar holds "URL TABLE BUSINESS" for TestHTTPServerHelper.
const httpServerVar = "INBOX_TEST_HTTP_SERVER"

// TestHTTPServerHelper is the server process of TestHTTPServerKilledMidTraffic: an endpoint
// behind inboxhttp on PostgreSQL that writes an order row and answers 201, until it is killed.
func TestHTTPServerHelper(t *testing.T) {
	args := strings.Fields(os.Getenv(httpServerVar))
	if len(args) != 3 {
		t.Skip("run by TestHTTPServerKilledMidTraffic")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, args[0])
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: args[1]})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := inboxhttp.NewMiddleware(store, inboxhttp.Config{Consumer: "billing", Scope: inboxhttp.Unscoped, RequireKey: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + args[2] + " (consumer, msg_key) SELECT 'billing', $1 FROM pg_sleep(0.002)"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := inbox.TxFromContext[pgx.Tx](r.Context())
		if _, err := tx.Exec(r.Context(), insert, r.Header.Get("X-Order")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %s, served by %d\n", r.Header.Get("X-Order"), os.Getpid())
	})
	server := &http.Server{Addr: "127.0.0.1:0", Handler: mw(handler)}
	listener, err := net.Listen("tcp", server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("listening %s\n", listener.Addr())
	_ = server.Serve(listener) // until the test kills the process
}

// The server process SIGKILLed twice mid-traffic and started again, while 8 clients send 400
// orders and retry each until it is answered 201: every order has exactly one claim and one
// business row (no key committed without its row, none doubled), and every order that was
// answered before a kill and asked again after it gets the first answer replayed.
func TestHTTPServerKilledMidTraffic(t *testing.T) {
	b := backends["pgx/postgres"](t)
	var addr atomic.Pointer[string]
	var current *exec.Cmd
	var exited <-chan error
	start := func() {
		listening := make(chan string, 1)
		current, exited = startHelper(t, "TestHTTPServerHelper", httpServerVar+"="+b.dsn+" "+b.table+" "+b.business, func(line string) {
			if a, ok := strings.CutPrefix(line, "listening "); ok {
				listening <- a
			}
		})
		select {
		case a := <-listening:
			addr.Store(&a)
		case <-time.After(60 * time.Second):
			t.Fatal("the server process did not start")
		}
	}
	kill := func() {
		_ = current.Process.Kill()
		<-exited
	}
	start()
	t.Cleanup(func() { kill() })

	const orders = 400
	var answered, cut atomic.Int64
	first := make([]string, orders) // the first 201 body of each order
	var wg sync.WaitGroup
	work := make(chan int)
	client := &http.Client{Timeout: 10 * time.Second}
	for range 8 {
		wg.Go(func() {
			for i := range work {
				key := fmt.Sprintf("killed-%03d", i)
				deadline := time.Now().Add(2 * time.Minute)
				for time.Now().Before(deadline) {
					// A request cut by a kill fails: the client sends it again.
					r, err := send(client, "http://"+*addr.Load()+"/orders", key, key, nil)
					if err != nil {
						cut.Add(1)
					}
					if err == nil && r.status == http.StatusCreated {
						first[i] = string(r.body)
						answered.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond) // a client's back-off
				}
			}
		})
	}
	go func() {
		for i := range orders {
			work <- i
		}
		close(work)
	}()
	for _, at := range []int64{100, 250} {
		for answered.Load() < at {
			time.Sleep(5 * time.Millisecond)
		}
		kill()
		start()
	}
	wg.Wait()

	for i := range orders {
		key := fmt.Sprintf("killed-%03d", i)
		if first[i] == "" {
			t.Errorf("%s: never answered", key)
			continue
		}
		if n := b.claims(t, "billing", inboxhttp.ScopedKey("", key)); n != 1 {
			t.Errorf("%s: %d claims", key, n)
		}
		if n := b.invoices(t, "billing", key); n != 1 {
			t.Errorf("%s: %d business rows", key, n)
		}
	}
	// Asked again, now of the third process, every order replays its first answer.
	for i := range orders {
		key := fmt.Sprintf("killed-%03d", i)
		if r := post(t, client, "http://"+*addr.Load()+"/orders", key, key, nil); string(r.body) != first[i] || !r.replayed {
			t.Errorf("%s: asked again: %q (replayed %v), first answer %q", key, r.body, r.replayed, first[i])
		}
	}
	wantRows(t, "business rows", b.rows(t, b.business, ""), orders)
	t.Logf("%d orders through 3 server processes, 2 killed; %d requests cut by a kill and sent again", orders, cut.Load())
}

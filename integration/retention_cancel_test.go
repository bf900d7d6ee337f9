package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A pass cancelled while its lock's transaction waits for the server (a RetentionRunner
// stopped mid-pass) returns with the lock released, not merely on its way out: the check
// before the next batch is held at a proxy, the pass is cancelled, and once it returns no
// cleanup lock is held. When the driver interrupted that statement by closing its
// connection, the rollback failed and the lock stayed until the server noticed, after the
// pass, and so after its runner, had returned (seen through a pooler as "1 cleanup locks
// held after the runners stopped").
func TestCancelledCleanupLeavesNoLock(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T, storeURL string) *backend
	}{
		{"pgx/postgres", func(t *testing.T, storeURL string) *backend { return pgxBackendAt(t, storeURL) }},
		{"database-sql/postgres", stdlibPostgresBackendAt},
	} {
		t.Run(c.name, func(t *testing.T) {
			hold := startHoldProxy(t, hostOf(t, testenv.PostgresURL(t)))
			b := c.open(t, withHost(t, testenv.PostgresURL(t), hold.Addr()))
			b.fillClaims(t, "old-", 300, 2*time.Hour)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				deleted int64
				err     error
			}
			done := make(chan result, 1)
			go func() {
				n, err := b.cleaner(t).Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{BatchSize: 100, Progress: func(p sqlinbox.CleanupProgress) {
					if p.Batches == 1 {
						hold.Arm() // the next reply: the lock's check before batch 2
					}
				}})
				done <- result{n, err}
			}()
			var clientGone <-chan struct{}
			select {
			case clientGone = <-hold.Held():
			case r := <-done:
				t.Fatalf("the pass ended before its check was held: %d deleted, %v", r.deleted, r.err)
			case <-time.After(60 * time.Second):
				t.Fatal("no reply held in 60 s")
			}
			cancel()
			// A driver that gives up the statement closes its connection at once; give it a
			// second to do so before the reply goes on.
			select {
			case <-clientGone:
			case <-time.After(time.Second):
			}
			hold.Release()
			var r result
			select {
			case r = <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("the cancelled pass did not return in 60 s")
			}

			if held := cleanupLocksHeld(t, b); held != 0 {
				t.Errorf("%d cleanup locks held once the cancelled pass returned, want 0", held)
			}
			if !errors.Is(r.err, context.Canceled) || strings.Contains(r.err.Error(), "release the lock") {
				t.Errorf("the cancelled pass returned %v, want context.Canceled and its lock released", r.err)
			}
			if r.deleted != 100 {
				t.Errorf("the cancelled pass deleted %d rows, want 100 (its first batch)", r.deleted)
			}
			wantRows(t, "claims left", b.rows(t, b.table, ""), 200)
		})
	}
}

// holdProxy forwards TCP connections to target and, once armed, holds the next reply from
// the server (on whichever connection it comes) until Release.
type holdProxy struct {
	listener net.Listener
	target   string
	armed    atomic.Bool
	// held receives, once, the channel that closes when the client of the held reply
	// closes its side.
	held    chan (<-chan struct{})
	release chan struct{}
	once    sync.Once
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{listener: ln, target: target, held: make(chan (<-chan struct{}), 1), release: make(chan struct{})}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.Release()
	})
	return p
}

func (p *holdProxy) Addr() string { return p.listener.Addr().String() }

// Arm makes the proxy hold the next reply.
func (p *holdProxy) Arm() { p.armed.Store(true) }

// Held delivers the channel of the held reply's client, once a reply is held.
func (p *holdProxy) Held() <-chan (<-chan struct{}) { return p.held }

// Release lets the held reply, and every later one, through.
func (p *holdProxy) Release() { p.once.Do(func() { close(p.release) }) }

func (p *holdProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	clientGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(server, client)
		close(clientGone)
		server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.armed.CompareAndSwap(true, false) {
				p.held <- clientGone
				<-p.release
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Postgres is one PostgreSQL server this package started on a free port of 127.0.0.1, with a
// data directory of its own, for the tests that stop a database and start it again: the
// shared server must never be stopped. Its database "test" exists; the user postgres logs in
// without a password.
type Postgres struct {
	*PostgresServer

	mu sync.Mutex
	r  *PostgresReplica // the helpers that start a server; no standby
}

// StartPostgres initialises a data directory in dir, which must be empty or not exist, and
// starts PostgreSQL on it. A missing binary is an error wrapping ErrNotInstalled. Close stops
// it.
func StartPostgres(dir string) (*Postgres, error) {
	r := &PostgresReplica{dir: dir}
	ports, err := r.prepare(1)
	if err != nil {
		return nil, err
	}
	r.Primary = &PostgresServer{Port: ports[0], Dir: filepath.Join(dir, "data")}
	p := &Postgres{PostgresServer: r.Primary, r: r}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	if err := r.run("initdb", "-D", r.Primary.Dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.start(ctx, r.Primary); err != nil {
		return nil, err
	}
	if err := r.exec(ctx, r.Primary, "postgres", "CREATE DATABASE test"); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// Stop stops the server at once, as pg_ctl stop -m immediate does (SIGQUIT: no shutdown
// checkpoint, no goodbye to the clients), and returns once it has exited: from then on a
// connection to its port is refused.
func (p *Postgres) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.proc.signal(syscall.SIGQUIT, 30*time.Second); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	return nil
}

// Start starts the stopped server again on its data directory and port (crash recovery
// first), and returns once it accepts connections.
func (p *Postgres) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.proc.exited() {
		return errors.New("postgres runs: stop it first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return p.r.start(ctx, p.PostgresServer)
}

// Close stops the server and removes its directory.
func (p *Postgres) Close() { p.r.Close() }

// NewPostgres starts a Postgres (StartPostgres) for t and stops it when t ends. Without
// PostgreSQL's server binaries it skips t, or fails it when INBOX_TEST_REQUIRE_SERVICES=1.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	dir, err := os.MkdirTemp("", "inbox-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartPostgres(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, ErrNotInstalled) && !RequireServices() {
			t.Skipf("private PostgreSQL: %v", err)
		}
		t.Fatalf("private PostgreSQL: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

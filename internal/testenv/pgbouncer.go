package testenv

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PgBouncerBinaryVar names the variable that overrides the pgbouncer binary's path;
// by default it is looked up in PATH (Debian installs /usr/sbin/pgbouncer).
const PgBouncerBinaryVar = "INBOX_TEST_PGBOUNCER"

// PgBouncer is a PgBouncer process this package started: a pooler in transaction mode in
// front of one PostgreSQL server, as many production databases are reached.
type PgBouncer struct {
	// URL is the PostgreSQL URL it was given, with its host and port replaced by the
	// pooler's.
	URL string

	cmd    *exec.Cmd
	output *lockedBuffer
	done   chan error
	// What the configuration is written from: Retarget writes it again.
	dir         string
	port        int
	serverConns int
}

// StartPgBouncer starts PgBouncer in pool_mode = transaction on a free port of 127.0.0.1, in
// front of the PostgreSQL server of postgresURL, with serverConns server connections per
// database and user. Its configuration is written into dir, which it makes readable by every
// user: PgBouncer refuses to run as root, so as root it runs as user postgres. Clients
// authenticate with trust; PgBouncer logs in to the server as the URL's user.
func StartPgBouncer(dir, postgresURL string, serverConns int) (*PgBouncer, error) {
	binary := get(PgBouncerBinaryVar, "")
	if binary == "" {
		var err error
		if binary, err = exec.LookPath("pgbouncer"); err != nil {
			return nil, fmt.Errorf("pgbouncer is not installed (apt-get install pgbouncer, or set %s): %w", PgBouncerBinaryVar, err)
		}
	}
	target, err := url.Parse(postgresURL)
	if err != nil {
		return nil, fmt.Errorf("parse the PostgreSQL URL: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &PgBouncer{done: make(chan error, 1), dir: dir, port: port, serverConns: serverConns}
	if err := p.writeConfig(target); err != nil {
		return nil, err
	}
	// The user pgbouncer runs as must reach the files; dir's parent is the caller's to open
	// (never change a directory this function was not given, such as the system's /tmp).
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var args []string
	if os.Geteuid() == 0 {
		args = append(args, "-u", "postgres")
	}
	cmd := exec.Command(binary, append(args, filepath.Join(dir, "pgbouncer.ini"))...)
	output := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	p.cmd, p.output = cmd, output
	go func() { p.done <- cmd.Wait() }()

	u := *target
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.URL = u.String()
	addr := u.Host
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return p, nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("pgbouncer exited (%v):\n%s", err, output.String())
		case <-time.After(20 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("pgbouncer does not listen on %s after 20 s:\n%s", addr, output.String())
		}
	}
}

// writeConfig writes the configuration of a pooler in front of the server of target.
func (p *PgBouncer) writeConfig(target *url.URL) error {
	user := target.User.Username()
	if user == "" {
		user = "postgres"
	}
	server := "host=" + target.Hostname() + " port=" + cmp.Or(target.Port(), "5432") + " user=" + user
	if password, ok := target.User.Password(); ok {
		server += " password=" + password
	}
	// The fallback database "*" serves every database name under its own name.
	ini := strings.Join([]string{
		"[databases]",
		"* = " + server,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(p.port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(p.dir, "users.txt"),
		"pool_mode = transaction",
		"default_pool_size = " + strconv.Itoa(p.serverConns),
		"max_client_conn = 1000",
		// After a failed login (a server gone in a failover) the pooler waits this long before
		// it tries a server again, whatever it was reconfigured to meanwhile; 15 s by default.
		"server_login_retry = 1",
		// pgx sends extra_float_digits at startup, which a pooler cannot keep per client.
		"ignore_startup_parameters = extra_float_digits",
		"log_connections = 0",
		"log_disconnections = 0",
		"",
	}, "\n")
	users := fmt.Sprintf("%q \"\"\n", user)
	for name, content := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Retarget points the pooler at the server of postgresURL (its host, port and user), as an
// operator or a failover manager does after a failover: the configuration is rewritten and
// reloaded (SIGHUP), and new server connections go to the new server.
func (p *PgBouncer) Retarget(postgresURL string) error {
	target, err := url.Parse(postgresURL)
	if err != nil {
		return fmt.Errorf("parse the PostgreSQL URL: %w", err)
	}
	if err := p.writeConfig(target); err != nil {
		return err
	}
	return p.cmd.Process.Signal(syscall.SIGHUP)
}

// Stop ends the process (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (p *PgBouncer) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
	}
}

// Output returns what PgBouncer has logged.
func (p *PgBouncer) Output() string { return p.output.String() }

// PgBouncerURL starts a PgBouncer (StartPgBouncer) in front of PostgresURL for t, with
// serverConns server connections, stops it when t ends, and returns the URL that reaches
// PostgreSQL through it. Without PostgreSQL or pgbouncer it skips t, or fails it when
// INBOX_TEST_REQUIRE_SERVICES=1.
func PgBouncerURL(t testing.TB, serverConns int) string {
	t.Helper()
	return NewPgBouncer(t, PostgresURL(t), serverConns).URL
}

// NewPgBouncer starts a PgBouncer (StartPgBouncer) in front of the PostgreSQL server of
// postgresURL for t, with serverConns server connections, and stops it when t ends. Without
// pgbouncer it skips t, or fails it when INBOX_TEST_REQUIRE_SERVICES=1.
func NewPgBouncer(t testing.TB, postgresURL string, serverConns int) *PgBouncer {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's directories are private to their owner: let pgbouncer's user through.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := StartPgBouncer(dir, postgresURL, serverConns)
	if err != nil {
		var notFound *exec.Error
		if errors.As(err, &notFound) && !RequireServices() {
			t.Skipf("PgBouncer: %v", err)
		}
		t.Fatalf("PgBouncer: %v", err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("PgBouncer's log:\n%s", p.Output())
		}
	})
	return p
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer is a bytes.Buffer that a process and a test may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

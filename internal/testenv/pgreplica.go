package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBinVar names the variable that overrides the directory of PostgreSQL's server
// binaries (initdb, postgres, pg_basebackup, pg_waldump); by default the newest
// /usr/lib/postgresql/*/bin (Debian), else the directory of initdb in PATH.
const PostgresBinVar = "INBOX_TEST_POSTGRES_BIN"

// PostgresReplica is a PostgreSQL primary and one streaming standby this package started,
// each on a free port of 127.0.0.1 with a data directory under one directory of its own. Both
// have the database "test"; the user postgres logs in without a password.
type PostgresReplica struct {
	// Primary takes the writes; Standby replays them, until Failover promotes it.
	Primary, Standby *PostgresServer
	// URL reaches database test on both servers, with target_session_attrs=read-write: a
	// client connects to whichever of them takes writes, and follows the primary across a
	// failover by reconnecting.
	URL string
	// Synchronous: each commit on the primary waits until the standby has flushed it.
	Synchronous bool
	// Took is how long the pair took to start.
	Took time.Duration

	dir string
	as  account
	bin string
}

// PostgresServer is one server of a PostgresReplica.
type PostgresServer struct {
	// Port is the server's port on 127.0.0.1; Dir its data directory.
	Port int
	Dir  string

	proc *process
}

// URL returns the URL of database test on this server alone.
func (s *PostgresServer) URL() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(s.Port) + "/test?sslmode=disable"
}

// Failover is what PostgresReplica.Failover did and measured.
type Failover struct {
	// Stopped is when the primary was stopped; Promoted when the standby took writes.
	Stopped, Promoted time.Time
	// Unreplicated is the number of commit records in the stopped primary's WAL that the
	// standby had not received when it was promoted: the commits a failover loses. With
	// synchronous replication none of them was reported to its client as committed.
	Unreplicated int
}

// StartPostgresReplica starts a primary and a standby that streams from it (initdb, then
// pg_basebackup -R -X stream) in dir, which must be empty or not exist. With synchronous
// the primary's commits wait for the standby (synchronous_standby_names = '*', set once the
// standby streams: before, CREATE DATABASE would wait for ever). A missing binary is an error
// wrapping ErrNotInstalled. Close stops both.
func StartPostgresReplica(dir string, synchronous bool) (*PostgresReplica, error) {
	began := time.Now()
	r := &PostgresReplica{dir: dir, Synchronous: synchronous}
	ports, err := r.prepare(2)
	if err != nil {
		return nil, err
	}
	r.Primary = &PostgresServer{Port: ports[0], Dir: filepath.Join(dir, "primary")}
	r.Standby = &PostgresServer{Port: ports[1], Dir: filepath.Join(dir, "standby")}
	r.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/test?sslmode=disable&target_session_attrs=read-write",
		r.Primary.Port, r.Standby.Port)
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if err := r.run("initdb", "-D", r.Primary.Dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	if err := r.start(ctx, r.Primary); err != nil {
		return nil, err
	}
	if err := r.exec(ctx, r.Primary, "postgres", "CREATE DATABASE test"); err != nil {
		return nil, err
	}
	if err := r.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(r.Primary.Port), "-U", "postgres",
		"-D", r.Standby.Dir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		return nil, err
	}
	if err := r.start(ctx, r.Standby); err != nil {
		return nil, err
	}
	want := "async"
	if synchronous {
		want = "sync"
		if err := r.exec(ctx, r.Primary, "postgres", "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			return nil, err
		}
		if err := r.exec(ctx, r.Primary, "postgres", "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	err = poll(time.Minute, func() (bool, string, error) {
		var state string
		err := r.queryRow(ctx, r.Primary, "postgres", "SELECT COALESCE(string_agg(state || '/' || sync_state, ','), 'no standby') FROM pg_stat_replication", &state)
		if err != nil {
			return false, "", err
		}
		return state == "streaming/"+want, state, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the standby does not stream (%s): %w", want, err)
	}
	ok = true
	r.Took = time.Since(began)
	return r, nil
}

// Failover stops the primary at once (pg_ctl stop -m immediate: no shutdown checkpoint, no
// goodbye to the clients or the standby, as in a crash) and promotes the standby, which then
// takes writes: clients on URL reconnect to it.
func (r *PostgresReplica) Failover(ctx context.Context) (Failover, error) {
	var f Failover
	f.Stopped = time.Now()
	if err := r.Primary.proc.signal(syscall.SIGQUIT, 30*time.Second); err != nil {
		return f, fmt.Errorf("stop the primary: %w", err)
	}
	var received string
	if err := r.queryRow(ctx, r.Standby, "test", "SELECT pg_last_wal_receive_lsn()::text", &received); err != nil {
		return f, fmt.Errorf("read the standby's position: %w", err)
	}
	var promoted bool
	if err := r.queryRow(ctx, r.Standby, "test", "SELECT pg_promote(true, 60)", &promoted); err != nil || !promoted {
		return f, fmt.Errorf("promote the standby: %v, %w", promoted, err)
	}
	f.Promoted = time.Now()
	var err error
	f.Unreplicated, err = r.commitsAfter(received)
	return f, err
}

// commitsAfter counts the commit records of the primary's WAL from lsn on.
func (r *PostgresReplica) commitsAfter(lsn string) (int, error) {
	cmd := r.as.command(filepath.Join(r.bin, "pg_waldump"), "--path="+filepath.Join(r.Primary.Dir, "pg_wal"),
		"--start="+lsn, "--rmgr=Transaction")
	out, err := cmd.Output()
	// pg_waldump ends with an error at the end of the WAL, where a crash leaves no marker.
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return 0, fmt.Errorf("pg_waldump: %w", err)
	}
	commits := 0
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, "desc: COMMIT") {
			commits++
		}
	}
	return commits, nil
}

// Close stops both servers and removes the directory.
func (r *PostgresReplica) Close() {
	for _, s := range []*PostgresServer{r.Primary, r.Standby} {
		if s != nil && s.proc != nil {
			if err := s.proc.signal(syscall.SIGQUIT, 10*time.Second); err != nil {
				s.proc.kill()
			}
		}
	}
	_ = os.RemoveAll(r.dir)
}

// start runs postgres on s's data directory and waits until it accepts connections.
func (r *PostgresReplica) start(ctx context.Context, s *PostgresServer) error {
	cmd := r.as.command(filepath.Join(r.bin, "postgres"), "-D", s.Dir,
		"-c", "port="+strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+r.dir,
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=100",
		"-c", "wal_keep_size=256MB",
	)
	output := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	proc, err := startProcess(cmd)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.proc = proc
	err = poll(time.Minute, func() (bool, string, error) {
		if proc.exited() {
			return false, "", fmt.Errorf("postgres exited: %v\n%s", proc.err, output.String())
		}
		conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(s.Port)+"/postgres?sslmode=disable&connect_timeout=2")
		if err != nil {
			return false, err.Error(), nil
		}
		_ = conn.Close(ctx)
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("postgres on port %d: %w\n%s", s.Port, err, output.String())
	}
	return nil
}

func (r *PostgresReplica) exec(ctx context.Context, s *PostgresServer, database, statement string) error {
	conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(s.Port)+"/"+database+"?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, statement); err != nil {
		return fmt.Errorf("%s: %w", statement, err)
	}
	return nil
}

func (r *PostgresReplica) queryRow(ctx context.Context, s *PostgresServer, database, query string, dest ...any) error {
	conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(s.Port)+"/"+database+"?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, query).Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	return nil
}

// run runs one of PostgreSQL's programs as the servers' user.
func (r *PostgresReplica) run(program string, args ...string) error {
	out, err := r.as.command(filepath.Join(r.bin, program), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", program, err, out)
	}
	return nil
}

// postgresBin finds the directory of PostgreSQL's server binaries.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if v := os.Getenv(PostgresBinVar); v != "" {
		dirs = []string{v}
	}
	slices.SortFunc(dirs, func(a, b string) int { return postgresMajor(b) - postgresMajor(a) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil && os.Getenv(PostgresBinVar) == "" {
		return filepath.Dir(initdb), nil
	}
	return "", fmt.Errorf("PostgreSQL's initdb %w (apt-get install postgresql, or set %s)", ErrNotInstalled, PostgresBinVar)
}

func postgresMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// NewPostgresReplica starts a PostgresReplica (StartPostgresReplica) for t and stops it when
// t ends. Without PostgreSQL's server binaries it skips t, or fails it when
// INBOX_TEST_REQUIRE_SERVICES=1.
func NewPostgresReplica(t testing.TB, synchronous bool) *PostgresReplica {
	t.Helper()
	dir, err := os.MkdirTemp("", "inbox-pgreplica-")
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartPostgresReplica(dir, synchronous)
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, ErrNotInstalled) && !RequireServices() {
			t.Skipf("PostgreSQL primary and standby: %v", err)
		}
		t.Fatalf("PostgreSQL primary and standby: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// prepare finds the server's binaries and the account to run them as, makes r's directory,
// and returns n free ports for its servers.
func (r *PostgresReplica) prepare(n int) ([]int, error) {
	var err error
	if r.bin, err = postgresBin(); err != nil {
		return nil, err
	}
	if r.as, err = serverAccount("postgres"); err != nil {
		return nil, err
	}
	if err := r.as.mkdir(r.dir, 0o755); err != nil {
		return nil, err
	}
	return freePorts(n)
}

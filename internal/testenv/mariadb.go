package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MariaDB is one stand-alone mariadbd this package started on a free port of 127.0.0.1,
// with a data directory of its own, for the tests that stop a database and start it again:
// the shared server must never be stopped. Its database "test" exists; root has no password.
type MariaDB struct {
	// Port is the server's port on 127.0.0.1.
	Port int

	dir    string
	as     account
	server string
	client string
	args   []string

	mu   sync.Mutex
	proc *process
}

// StartMariaDB initialises a data directory in dir, which must be empty or not exist, and
// starts mariadbd on it. A missing binary is an error wrapping ErrNotInstalled. Close stops it.
func StartMariaDB(dir string) (*MariaDB, error) {
	m := &MariaDB{dir: dir}
	var err error
	if m.server, err = findBinary(MariaDBServerVar, "apt-get install mariadb-server", "/usr/sbin/mariadbd", "mariadbd"); err != nil {
		return nil, err
	}
	if m.client, err = findBinary("INBOX_TEST_MARIADB_CLIENT", "apt-get install mariadb-client", "mariadb", "mysql"); err != nil {
		return nil, err
	}
	install, err := findBinary("INBOX_TEST_MARIADB_INSTALL_DB", "apt-get install mariadb-server", "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	if m.as, err = serverAccount("mysql"); err != nil {
		return nil, err
	}
	data, tmp := filepath.Join(dir, "data"), filepath.Join(dir, "tmp")
	if err := errors.Join(m.as.mkdir(dir, 0o750), m.as.mkdir(data, 0o750), m.as.mkdir(tmp, 0o750)); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	m.Port = ports[0]
	m.args = []string{
		"--no-defaults",
		"--datadir=" + data,
		"--port=" + strconv.Itoa(m.Port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"),
		"--tmpdir=" + tmp,
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M",
		"--max-connections=300",
	}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	cmd := m.as.command(install, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--innodb-log-file-size=16M", "--innodb-buffer-pool-size=32M")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", filepath.Base(install), err, out)
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	if _, err := m.Query("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

// DSN returns the go-sql-driver/mysql DSN of database test, as root, with params
// ("parseTime=true") if any.
func (m *MariaDB) DSN(params string) string {
	dsn := "root@tcp(127.0.0.1:" + strconv.Itoa(m.Port) + ")/test"
	if params != "" {
		dsn += "?" + params
	}
	return dsn
}

// Kill ends the server with SIGKILL, as a crash would, and returns once it has exited: from
// then on a connection to its port is refused.
func (m *MariaDB) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.kill()
		m.proc = nil
	}
}

// Start starts the server on its data directory and port (InnoDB's crash recovery first,
// after Kill) and returns once it answers queries.
func (m *MariaDB) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return errors.New("mariadbd runs: kill it first")
	}
	cmd := m.as.command(m.server, m.args...)
	output := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	proc, err := startProcess(cmd)
	if err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	m.proc = proc
	err = poll(time.Minute, func() (bool, string, error) {
		if proc.exited() {
			return false, "", fmt.Errorf("mariadbd exited: %v\n%s\n%s", proc.err, output.String(), m.log())
		}
		if _, err := m.Query("SELECT 1"); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("mariadbd on port %d: %w", m.Port, err)
	}
	return nil
}

// Query runs statement with the command-line client as root and returns its rows,
// tab-separated.
func (m *MariaDB) Query(statement string) (string, error) {
	cmd := exec.Command(m.client, "--no-defaults", "--protocol=TCP", "--host=127.0.0.1",
		"--port="+strconv.Itoa(m.Port), "--user=root", "--connect-timeout=2", "--batch", "--skip-column-names",
		"--execute="+statement)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("%s: %w: %s", statement, err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", fmt.Errorf("%s: %w", statement, err)
	}
	return string(out), nil
}

func (m *MariaDB) log() string {
	b, err := os.ReadFile(filepath.Join(m.dir, "error.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// Close kills the server and removes its directory.
func (m *MariaDB) Close() {
	m.Kill()
	_ = os.RemoveAll(m.dir)
}

// NewMariaDB starts a MariaDB (StartMariaDB) for t and stops it when t ends. Without the
// binaries it skips t, or fails it when INBOX_TEST_REQUIRE_SERVICES=1.
func NewMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	dir, err := os.MkdirTemp("", "inbox-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	m, err := StartMariaDB(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, ErrNotInstalled) && !RequireServices() {
			t.Skipf("private MariaDB: %v", err)
		}
		t.Fatalf("private MariaDB: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

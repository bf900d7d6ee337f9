package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The binaries a Galera cluster needs, and the variables that override where they are.
const (
	MariaDBServerVar  = "INBOX_TEST_MARIADBD"        // default: /usr/sbin/mariadbd
	GaleraProviderVar = "INBOX_TEST_GALERA_PROVIDER" // default: /usr/lib/galera/libgalera_smm.so (Debian's galera-4)
)

// GaleraSuspectTimeout is how long the cluster's nodes wait for a silent node before they
// agree it is gone: a node killed or paused stalls the cluster's commits for about as long.
// Galera's default is 5 s; the keepalive must stay under a third of it. Shorter than 3 s,
// a node starved of CPU by parallel tests can be taken for gone.
const GaleraSuspectTimeout = 3 * time.Second

// galeraSyncTimeout bounds a node's start, its state transfer included.
const galeraSyncTimeout = 2 * time.Minute

// Galera is a MariaDB Galera cluster this package started: nodes of mariadbd on free ports
// of 127.0.0.1, each with a data directory under one directory of its own, all of them
// primaries (any node takes writes). Its database "test" exists; root has no password.
type Galera struct {
	Nodes []*GaleraNode
	// Took is how long the cluster took to start.
	Took time.Duration

	dir      string
	as       account
	server   string // mariadbd
	client   string // mariadb, for the nodes' status
	provider string
}

// GaleraNode is one node of a Galera cluster.
type GaleraNode struct {
	// Name is the node's name in the cluster ("node1").
	Name string
	// Port is the node's SQL port on 127.0.0.1.
	Port int

	cluster *Galera
	dir     string
	args    []string // mariadbd's arguments, but where to start from

	mu     sync.Mutex
	proc   *process // nil once killed
	paused bool
}

// StartGalera starts a Galera cluster of nodes nodes in dir, which must be empty or not
// exist: the first node founds the cluster, the others join it by state transfer (rsync).
// A missing binary is an error wrapping ErrNotInstalled. Close stops it.
func StartGalera(dir string, nodes int) (*Galera, error) {
	began := time.Now()
	g := &Galera{dir: dir}
	var err error
	if g.server, err = findBinary(MariaDBServerVar, "apt-get install mariadb-server", "/usr/sbin/mariadbd", "mariadbd"); err != nil {
		return nil, err
	}
	if g.provider, err = findBinary(GaleraProviderVar, "apt-get install galera-4", "/usr/lib/galera/libgalera_smm.so", "/usr/lib/libgalera_smm.so"); err != nil {
		return nil, err
	}
	if _, err := findBinary("INBOX_TEST_RSYNC", "apt-get install rsync: Galera's state transfer needs it", "rsync"); err != nil {
		return nil, err
	}
	if g.client, err = findBinary("INBOX_TEST_MARIADB_CLIENT", "apt-get install mariadb-client", "mariadb", "mysql"); err != nil {
		return nil, err
	}
	install, err := findBinary("INBOX_TEST_MARIADB_INSTALL_DB", "apt-get install mariadb-server", "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	if g.as, err = serverAccount("mysql"); err != nil {
		return nil, err
	}
	if err := g.as.mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(4 * nodes)
	if err != nil {
		return nil, err
	}
	var members []string
	for i := range nodes {
		members = append(members, "127.0.0.1:"+strconv.Itoa(ports[4*i+1]))
	}
	for i := range nodes {
		sqlPort, gcommPort, istPort, sstPort := ports[4*i], ports[4*i+1], ports[4*i+2], ports[4*i+3]
		n := &GaleraNode{Name: "node" + strconv.Itoa(i+1), Port: sqlPort, cluster: g, dir: filepath.Join(dir, "node"+strconv.Itoa(i+1))}
		n.args = []string{
			"--no-defaults",
			"--datadir=" + n.dir,
			"--port=" + strconv.Itoa(sqlPort),
			"--bind-address=127.0.0.1",
			"--socket=" + filepath.Join(n.dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
			"--log-error=" + filepath.Join(n.dir, "error.log"),
			"--tmpdir=" + n.dir + "-tmp",
			"--skip-name-resolve",
			"--innodb-buffer-pool-size=32M",
			"--innodb-log-file-size=16M",
			"--max-connections=300",
			"--binlog-format=ROW",
			"--innodb-autoinc-lock-mode=2",
			"--wsrep-on=ON",
			"--wsrep-provider=" + g.provider,
			"--wsrep-cluster-name=inbox_test",
			"--wsrep-cluster-address=gcomm://" + strings.Join(members, ","),
			"--wsrep-node-name=" + n.Name,
			"--wsrep-node-address=127.0.0.1:" + strconv.Itoa(gcommPort),
			"--wsrep-node-incoming-address=127.0.0.1:" + strconv.Itoa(sqlPort),
			"--wsrep-sst-method=rsync",
			"--wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(sstPort),
			"--wsrep-provider-options=" + strings.Join([]string{
				"base_port=" + strconv.Itoa(gcommPort),
				"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(gcommPort),
				"ist.recv_addr=127.0.0.1:" + strconv.Itoa(istPort),
				"evs.suspect_timeout=PT" + strconv.FormatFloat(GaleraSuspectTimeout.Seconds(), 'f', -1, 64) + "S",
				"evs.inactive_timeout=PT" + strconv.FormatFloat(2*GaleraSuspectTimeout.Seconds(), 'f', -1, 64) + "S",
				"evs.keepalive_period=PT0.5S",
				"evs.inactive_check_period=PT0.5S",
				"gcache.size=64M",
			}, ";"),
		}
		g.Nodes = append(g.Nodes, n)
	}
	ok := false
	defer func() {
		if !ok {
			g.Close()
		}
	}()

	// Every data directory starts as a stand-alone server's; the joiners' are replaced by
	// the founder's in their state transfer.
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i, n := range g.Nodes {
		wg.Go(func() {
			// Temporary files of their own: installs that share one directory collide.
			if err := errors.Join(g.as.mkdir(n.dir, 0o750), g.as.mkdir(n.dir+"-tmp", 0o750)); err != nil {
				errs[i] = err
				return
			}
			cmd := g.as.command(install, "--no-defaults", "--datadir="+n.dir, "--tmpdir="+n.dir+"-tmp", "--auth-root-authentication-method=normal",
				"--skip-test-db", "--wsrep-on=OFF", "--innodb-log-file-size=16M", "--innodb-buffer-pool-size=32M")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("%s: %s: %w\n%s", n.Name, filepath.Base(install), err, out)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	if err := g.Nodes[0].start("--wsrep-new-cluster"); err != nil {
		return nil, err
	}
	if err := g.Nodes[0].waitSynced(galeraSyncTimeout, 1); err != nil {
		return nil, err
	}
	if _, err := g.Nodes[0].query("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		return nil, err
	}
	// One joiner at a time: joiners that arrive together can miss each other's install
	// messages and start over.
	for i, n := range g.Nodes[1:] {
		if err := n.start(); err != nil {
			return nil, err
		}
		if err := n.waitSynced(galeraSyncTimeout, i+2); err != nil {
			return nil, err
		}
	}
	ok = true
	g.Took = time.Since(began)
	return g, nil
}

// Close kills every node and removes the cluster's directory.
func (g *Galera) Close() {
	for _, n := range g.Nodes {
		n.mu.Lock()
		if n.proc != nil {
			n.proc.kill()
			n.proc = nil
		}
		n.mu.Unlock()
	}
	_ = os.RemoveAll(g.dir)
}

// WaitSynced waits until every node runs, is synced and sees all the others in one primary
// component.
func (g *Galera) WaitSynced() error {
	for _, n := range g.Nodes {
		if err := n.waitSynced(galeraSyncTimeout, len(g.Nodes)); err != nil {
			return err
		}
	}
	return nil
}

// Repair resumes the paused nodes, restarts the killed ones and waits until the cluster is
// whole again: what a test that paused or killed nodes runs before it ends.
func (g *Galera) Repair() error {
	for _, n := range g.Nodes {
		if err := n.Resume(); err != nil {
			return err
		}
	}
	for _, n := range g.Nodes {
		n.mu.Lock()
		down := n.proc == nil || n.proc.exited()
		n.mu.Unlock()
		if down {
			if err := n.Restart(); err != nil {
				return err
			}
		}
	}
	return g.WaitSynced()
}

// DSN returns the go-sql-driver/mysql DSN of database test on the node, as root, with
// params ("parseTime=true&interpolateParams=true") if any.
func (n *GaleraNode) DSN(params string) string {
	dsn := "root@tcp(127.0.0.1:" + strconv.Itoa(n.Port) + ")/test"
	if params != "" {
		dsn += "?" + params
	}
	return dsn
}

// Kill ends the node with SIGKILL, as a crash would, and waits for it to exit.
func (n *GaleraNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		n.proc.kill()
		n.proc = nil
	}
	n.paused = false
}

// Restart starts a node that was killed and waits until it is synced. It recovers the
// position the node's data reached first (mariadbd --wsrep-recover) and starts from there,
// so that the node rejoins by incremental state transfer (IST) from another node's cache,
// not by a full copy of the data.
func (n *GaleraNode) Restart() error {
	n.mu.Lock()
	running := n.proc != nil && !n.proc.exited()
	n.mu.Unlock()
	if running {
		return fmt.Errorf("%s runs: kill it first", n.Name)
	}
	// The others must have dropped the killed node first, or the new one waits for them.
	if err := n.waitEvicted(); err != nil {
		return err
	}
	recoverLog := filepath.Join(n.dir, "recover.log")
	_ = os.Remove(recoverLog)
	cmd := n.cluster.as.command(n.cluster.server, append(n.args, "--wsrep-recover", "--log-error="+recoverLog)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: mariadbd --wsrep-recover: %w\n%s", n.Name, err, out)
	}
	logged, err := os.ReadFile(recoverLog)
	if err != nil {
		return err
	}
	m := recoveredPosition.FindSubmatch(logged)
	if m == nil {
		return fmt.Errorf("%s: mariadbd --wsrep-recover found no position:\n%s", n.Name, logged)
	}
	if err := n.start("--wsrep-start-position=" + string(m[1])); err != nil {
		return err
	}
	return n.waitSynced(galeraSyncTimeout, len(n.cluster.Nodes))
}

var recoveredPosition = regexp.MustCompile(`WSREP: Recovered position: (\S+)`)

// Pause stops the node with SIGSTOP: it neither answers its clients nor the other nodes,
// as a node behind a network partition; after GaleraSuspectTimeout the others go on without
// it (or, if they are not a majority, stop taking writes).
func (n *GaleraNode) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return fmt.Errorf("%s is not running", n.Name)
	}
	if err := n.proc.signal(syscall.SIGSTOP, 0); err != nil {
		return err
	}
	n.paused = true
	return nil
}

// Resume continues a paused node (SIGCONT); it rejoins the cluster by itself.
func (n *GaleraNode) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || !n.paused {
		return nil
	}
	if err := n.proc.signal(syscall.SIGCONT, 0); err != nil {
		return err
	}
	n.paused = false
	return nil
}

// Status returns the node's wsrep status variables (SHOW GLOBAL STATUS LIKE 'wsrep_%'), such as
// wsrep_cluster_status (Primary or non-Primary), wsrep_cluster_size and
// wsrep_local_state_comment (Synced, Joining, ...).
func (n *GaleraNode) Status() (map[string]string, error) {
	out, err := n.query("SHOW GLOBAL STATUS LIKE 'wsrep_%'")
	if err != nil {
		return nil, err
	}
	status := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if name, value, ok := strings.Cut(line, "\t"); ok {
			status[name] = value
		}
	}
	return status, nil
}

// Log returns the end of the node's error log, for a failed test's output.
func (n *GaleraNode) Log() string {
	b, err := os.ReadFile(filepath.Join(n.dir, "error.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

func (n *GaleraNode) start(extra ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := n.cluster.as.command(n.cluster.server, append(n.args, extra...)...)
	output := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	proc, err := startProcess(cmd)
	if err != nil {
		return fmt.Errorf("%s: start mariadbd: %w", n.Name, err)
	}
	n.proc, n.paused = proc, false
	return nil
}

// waitEvicted waits until every other node that runs has dropped n from its view.
func (n *GaleraNode) waitEvicted() error {
	for _, other := range n.cluster.Nodes {
		other.mu.Lock()
		up := other != n && other.proc != nil && !other.proc.exited() && !other.paused
		other.mu.Unlock()
		if !up {
			continue
		}
		err := poll(time.Minute, func() (bool, string, error) {
			s, err := other.Status()
			if err != nil {
				return false, err.Error(), nil
			}
			size, _ := strconv.Atoi(s["wsrep_cluster_size"])
			return size < len(n.cluster.Nodes), "cluster of " + s["wsrep_cluster_size"], nil
		})
		if err != nil {
			return fmt.Errorf("%s still counts %s: %w", other.Name, n.Name, err)
		}
	}
	return nil
}

// waitSynced waits until the node is synced in a primary component of size nodes.
func (n *GaleraNode) waitSynced(timeout time.Duration, size int) error {
	want := strconv.Itoa(size)
	err := poll(timeout, func() (bool, string, error) {
		n.mu.Lock()
		proc := n.proc
		n.mu.Unlock()
		if proc == nil || proc.exited() {
			return false, "", fmt.Errorf("%s exited", n.Name)
		}
		s, err := n.Status()
		if err != nil {
			return false, err.Error(), nil
		}
		state := fmt.Sprintf("%s, %s, cluster of %s", s["wsrep_cluster_status"], s["wsrep_local_state_comment"], s["wsrep_cluster_size"])
		return s["wsrep_cluster_status"] == "Primary" && s["wsrep_local_state_comment"] == "Synced" &&
			s["wsrep_cluster_size"] == want && s["wsrep_ready"] == "ON", state, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not synced: %w\n%s", n.Name, err, n.Log())
	}
	return nil
}

// query runs statement on the node with the command-line client and returns its rows,
// tab-separated.
func (n *GaleraNode) query(statement string) (string, error) {
	cmd := exec.Command(n.cluster.client, "--no-defaults", "--protocol=TCP", "--host=127.0.0.1",
		"--port="+strconv.Itoa(n.Port), "--user=root", "--connect-timeout=2", "--batch", "--skip-column-names",
		"--execute="+statement)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %s: %w: %s", n.Name, statement, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

var sharedGalera struct {
	once sync.Once
	g    *Galera
	err  error
}

// SharedGalera returns the 3-node Galera cluster that the tests of this test binary share,
// started by the first test that asks for it (about 11 s and 390 MB) and stopped by
// StopSharedGalera, which the package's TestMain calls. Without the binaries it skips t, or
// fails it when INBOX_TEST_REQUIRE_SERVICES=1. A test that kills or pauses nodes calls
// Repair before it ends, so that the next test finds the cluster whole.
func SharedGalera(t testing.TB) *Galera {
	t.Helper()
	sharedGalera.once.Do(func() {
		defer func() {
			if sharedGalera.g != nil {
				t.Logf("Galera: %d nodes started in %.1fs", len(sharedGalera.g.Nodes), sharedGalera.g.Took.Seconds())
			}
		}()
		dir, err := os.MkdirTemp("", "inbox-galera-")
		if err != nil {
			sharedGalera.err = err
			return
		}
		sharedGalera.g, sharedGalera.err = StartGalera(dir, 3)
		if sharedGalera.err != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if err := sharedGalera.err; err != nil {
		if errors.Is(err, ErrNotInstalled) && !RequireServices() {
			t.Skipf("Galera: %v", err)
		}
		t.Fatalf("Galera: %v", err)
	}
	return sharedGalera.g
}

// StopSharedGalera stops the cluster SharedGalera started, if it did.
func StopSharedGalera() {
	if sharedGalera.g != nil {
		sharedGalera.g.Close()
	}
}

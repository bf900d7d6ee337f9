package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ErrNotInstalled is wrapped by the errors of the helpers that start servers of their own
// (StartGalera, StartPostgresReplica) when a binary they need is missing: the tests that need
// them skip, or fail when INBOX_TEST_REQUIRE_SERVICES=1.
var ErrNotInstalled = errors.New("not installed")

// findBinary returns the path of the binary that variable names, else of the first of
// candidates that exists (an absolute path, or a name looked up in PATH).
func findBinary(variable, install string, candidates ...string) (string, error) {
	if v := os.Getenv(variable); v != "" {
		candidates = []string{v}
	}
	for _, c := range candidates {
		if filepath.IsAbs(c) {
			if _, err := os.Stat(c); err == nil {
				return c, nil
			}
			continue
		}
		if path, err := exec.LookPath(c); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s %w (%s, or set %s)", candidates[0], ErrNotInstalled, install, variable)
}

// account is the OS user a server runs as: the current one, or, as root, a system user of
// the server's own, because PostgreSQL refuses root and rsync's daemon, which Galera's state
// transfer starts, drops root for nobody.
type account struct {
	credential *syscall.Credential // nil: the current user
	uid, gid   int
}

func serverAccount(name string) (account, error) {
	if os.Geteuid() != 0 {
		return account{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, fmt.Errorf("run the server as user %s (it cannot run as root): %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return account{credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid: uid, gid: gid}, nil
}

// command returns cmd for binary with args, run as a, and killed if the test process dies
// first, so that a test binary killed by its timeout leaves no server behind.
func (a account) command(binary string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: a.credential, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// mkdir makes dir, owned by a.
func (a account) mkdir(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	return os.Chown(dir, a.uid, a.gid)
}

// process is a server this package started.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // its exit, once done is closed
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig and, for a signal that ends it, waits up to wait for the process to exit.
func (p *process) signal(sig syscall.Signal, wait time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if wait == 0 {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("%s did not exit %s after %s", filepath.Base(p.cmd.Path), wait, sig)
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill() // a paused process dies too

	<-p.done
}

// freePorts returns n distinct free ports of 127.0.0.1, all held until every one is found.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// poll calls cond every 100 ms until it returns true or an error, or timeout passes; it
// returns nil, cond's error, or the last state it described.
func poll(timeout time.Duration, cond func() (done bool, state string, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, state, err := cond()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s: %s", timeout, state)
		}
		time.Sleep(100 * time.Millisecond) // polling interval of a server's state
	}
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// delayProxy forwards TCP connections to a server and delays every byte by delay in each
// direction, as a network between two hosts would: a round trip through it takes 2 × delay
// more than one straight to the server. It is a delay line, not a bandwidth limit: what a
// client pipelines stays pipelined.
type delayProxy struct {
	listener net.Listener
	target   string
	delay    time.Duration

	mu    sync.Mutex
	conns []net.Conn
}

func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{listener: ln, target: target, delay: delay}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client)
		}
	}()
	return p, nil
}

// proxyEnv set to "target,delay" makes this program a delay proxy and nothing else: that is
// how spawnDelayProxy runs it.
const proxyEnv = "INBOX_BENCH_DELAY_PROXY"

// spawnDelayProxy runs a delayProxy in a child process of this program, under nice -n -10
// where that is allowed. A network's delay does not wait for a CPU; in a process of its own
// and at a higher priority than the benchmark and the databases, the proxy's wake-ups do not
// queue behind them when the cores are busy, so the delay stays close to what was asked.
// It returns the proxy's address and a function that stops it.
func spawnDelayProxy(target string, delay time.Duration) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe)
	if nice, err := exec.LookPath("nice"); err == nil {
		cmd = exec.Command(nice, "-n", "-10", exe) // warns on stderr and runs anyway if not allowed
	}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s", proxyEnv, target, delay))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("delay proxy: %w", err)
	}
	return strings.TrimSpace(addr), stop, nil
}

// serveDelayProxy is the child of spawnDelayProxy: it prints its address and proxies until
// its standard input closes (the parent stopped it, or ended).
func serveDelayProxy(spec string) error {
	target, d, _ := strings.Cut(spec, ",")
	delay, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	p, err := startDelayProxy(target, delay)
	if err != nil {
		return err
	}
	fmt.Println(p.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return p.Close()
}

func (p *delayProxy) Addr() string { return p.listener.Addr().String() }

// Close stops accepting and closes every proxied connection.
func (p *delayProxy) Close() error {
	err := p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	return err
}

func (p *delayProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	go p.pipe(server, client)
	p.pipe(client, server)
	p.mu.Lock()
	p.conns = slices.DeleteFunc(p.conns, func(c net.Conn) bool { return c == client || c == server })
	p.mu.Unlock()
}

// pipe copies src to dst, writing each chunk delay after it was read, in order.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	timer, err := newTimer()
	if err != nil {
		return
	}
	defer timer.Close()
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(p.delay), slices.Clone(buf[:n])}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if timer.sleep(time.Until(c.due)) != nil {
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	src.Close()
	for range chunks { // let the reader end
	}
}

// timer sleeps with microsecond precision. Go's timers wake up to a millisecond late when
// the runtime is idle (its network poller waits in whole milliseconds), which would turn
// 0.25 ms into more than 1 ms; a timerfd read through the poller wakes within tens of
// microseconds, and parks only the goroutine.
type timer struct {
	fd   int
	file *os.File
}

func newTimer() (*timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &timer{fd: fd, file: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// wakeLatency is about how late a timerfd wakes a goroutine here; sleep ends that much early.
const wakeLatency = 25 * time.Microsecond

func (t *timer) sleep(d time.Duration) error {
	if d -= wakeLatency; d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return err
	}
	var expirations [8]byte
	_, err := t.file.Read(expirations[:])
	return err
}

func (t *timer) Close() error { return t.file.Close() }

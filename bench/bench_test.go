package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// TestMain lets the test binary serve as the delay proxy's child process, as the program does.
func TestMain(m *testing.M) {
	if spec := os.Getenv(proxyEnv); spec != "" {
		if err := serveDelayProxy(spec); err != nil {
			log.Fatal(err)
		}
		return
	}
	os.Exit(m.Run())
}

// TestDelayProxy sends a pipelined megabyte through the proxy to an echo server and back:
// every byte arrives, in order, and a round trip takes at least twice the delay.
func TestDelayProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	const delay = 2 * time.Millisecond
	proxy, err := startDelayProxy(echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	conn, err := net.Dial("tcp", proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ping := []byte{1}
	start := time.Now()
	if _, err := conn.Write(ping); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, ping); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 2*delay {
		t.Errorf("round trip took %s, want at least %s", got, 2*delay)
	}

	sent := make([]byte, 1<<20)
	_, _ = rand.Read(sent)
	go func() {
		for i := 0; i < len(sent); i += 1000 {
			if _, err := conn.Write(sent[i:min(i+1000, len(sent))]); err != nil {
				return
			}
		}
	}()
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Error("the bytes that came back differ from the bytes sent")
	}
}

// TestQuickRun runs the cost scenario on PostgreSQL, straight and through the proxy, with
// tiny rounds: it writes the table and the charts, and counts the round trips each variant
// is known to take. It skips without PostgreSQL (fails with INBOX_TEST_REQUIRE_SERVICES=1).
func TestQuickRun(t *testing.T) {
	pg := testenv.PostgresURL(t)
	out := t.TempDir()
	opts, err := parseFlags([]string{
		"-scenarios", "cost", "-workers", "2", "-delays", "0,1ms", "-round", "100ms", "-rounds", "3",
		"-postgres", pg, "-mysql", "off", "-sqlite", "off", "-out", out, "-name", "t",
	}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := openEnv(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rep := &report{opts: opts, env: env}
	err = runCost(ctx, env, rep)
	if err := env.close(); err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Round trips per message: exact for the variants without the inbox; at most these for
	// the inbox (BEGIN and the claim share a batch; with WriteBehind, on a store that can
	// claim and commit in one step, the whole message is one batch).
	wb := 2.0
	if _, ok := inbox.Store(&sqlinbox.Store{}).(inbox.WriteBehindStore); ok {
		wb = 1
	}
	for variant, want := range map[string]float64{vBusiness: 3, vHand: 4, vPiped: 3, vTx: 3, vQueue: 2, vWB: wb, vDup: 2} {
		for _, delay := range opts.delays {
			x, ok := rep.find("cost", "postgres", delay, 2, variant)
			if !ok {
				t.Errorf("no row for %s at %s", variant, delay)
				continue
			}
			exact := variant == vBusiness || variant == vHand || variant == vPiped
			if x.trips > want+0.05 || (exact && x.trips < want-0.05) {
				t.Errorf("%s at %s each way: %.2f round trips per message, want %v", variant, delay, x.trips, want)
			}
			if delay > 0 && x.rtt < 2*delay {
				t.Errorf("round trip through the proxy measured %s, want at least %s", x.rtt, 2*delay)
			}
		}
	}
	charts, err := rep.writeCharts(out)
	if err != nil {
		t.Fatal(err)
	}
	md := rep.markdown(charts)
	for _, want := range []string{"| " + vHand + " | 4.00 |", "RTT", "t-cost-postgres-2w.png", "t-cost-postgres-2w-ratio.png"} {
		if !strings.Contains(md, want) {
			t.Errorf("results lack %q:\n%s", want, md)
		}
	}
	for _, c := range charts {
		if fi, err := os.Stat(filepath.Join(out, c)); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", c, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"-rounds", "2"},
		{"-scenarios", "nope"},
		{"-workers", "0"},
		{"-delays", "-1ms"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	o, err := parseFlags([]string{"-delays", "1ms,0,250us,1ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{0, 250 * time.Microsecond, time.Millisecond}; !slices.Equal(o.delays, want) {
		t.Errorf("delays %v, want %v", o.delays, want)
	}
}

// TestDocumentedCommandsParse checks that every `go run ./bench` command in a shell block of
// the documentation is one this program accepts.
func TestDocumentedCommandsParse(t *testing.T) {
	found := 0
	for _, doc := range []string{"../README.md", "../docs/performance.md", "../docs/benchmarks/README.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(text), "\n") {
			line, _, _ = strings.Cut(line, " #")
			if args, ok := strings.CutPrefix(strings.TrimSpace(line), "go run ./bench"); ok {
				found++
				if _, err := parseFlags(strings.Fields(args), io.Discard); err != nil {
					t.Errorf("%s: %q: %v", doc, line, err)
				}
			}
		}
	}
	if found == 0 {
		t.Error("the documentation shows no go run ./bench command")
	}
}

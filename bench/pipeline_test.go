package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestPipelineQuickRun runs the pipeline scenario with tiny rounds through the proxy: every
// variant has its row and its latencies, write-behind takes one round trip per message, and
// the pipelined store with more messages in flight than connections fewer.
func TestPipelineQuickRun(t *testing.T) {
	pg := testenv.PostgresURL(t)
	opts, err := parseFlags([]string{
		"-scenarios", "pipeline", "-pipeline-delays", "250us", "-round", "200ms", "-rounds", "3",
		"-postgres", pg, "-mysql", "off", "-sqlite", "off", "-out", t.TempDir(), "-name", "t",
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
	err = runPipeline(ctx, env, rep)
	if err := env.close(); err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range pipelineVariants {
		x, ok := rep.find("pipeline", "postgres", 250*time.Microsecond, pipelineConns, v.name)
		if !ok {
			t.Errorf("no row for %s", v.name)
			continue
		}
		switch {
		case !v.pipelined && (x.trips < 0.95 || x.trips > 1.1):
			t.Errorf("%s: %.2f round trips per message, want 1", v.name, x.trips)
		case v.pipelined && v.inFlight > pipelineConns && x.trips > 0.7:
			t.Errorf("%s: %.2f round trips per message: the pipelines carried about one message each", v.name, x.trips)
		}
		for _, q := range []string{"p50", "p99"} {
			if d, ok := rep.findDerived("pipeline", 250*time.Microsecond, pipelineConns, latencyName(q, v.name)); !ok || d.s.med <= 0 {
				t.Errorf("no %s latency for %s", q, v.name)
			}
		}
	}
	if md := rep.markdown(nil); !strings.Contains(md, "pipelined ÷ write-behind") {
		t.Errorf("the results name no pipeline target:\n%s", md)
	}
}

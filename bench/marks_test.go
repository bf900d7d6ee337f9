package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestMarksQuickRun runs the marks scenario with tiny rounds through the proxy: every variant
// has its row, both inbox variants take one round trip per message (the marks' UPDATEs add a
// few in a hundred), and the scenario itself checks that every handler ran once per message
// and that the marked table holds no unpublished record at the end.
func TestMarksQuickRun(t *testing.T) {
	pg := testenv.PostgresURL(t)
	opts, err := parseFlags([]string{
		"-scenarios", "marks", "-pipeline-delays", "250us", "-workers", "8", "-round", "200ms", "-rounds", "3",
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
	err = runMarks(ctx, env, rep)
	if err := env.close(); err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{vMarksOff, vMarksOn, vMarksFloor} {
		x, ok := rep.find("marks", "postgres", 250*time.Microsecond, 8, name)
		if !ok {
			t.Errorf("no row for %s", name)
			continue
		}
		if name != vMarksFloor && (x.trips < 0.95 || x.trips > 1.1) {
			t.Errorf("%s: %.2f round trips per message, want 1", name, x.trips)
		}
	}
}

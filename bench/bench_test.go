package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestQuickRun runs the direct scenario on PostgreSQL with tiny rounds and checks that it
// writes a table and a chart, and that the targets section finds its rows. It skips without
// PostgreSQL (fails with INBOX_TEST_REQUIRE_SERVICES=1).
func TestQuickRun(t *testing.T) {
	pg := testenv.PostgresURL(t)
	out := t.TempDir()
	opts, err := parseFlags([]string{
		"-quick", "-scenarios", "direct,produced", "-workers", "1,8", "-round", "50ms", "-rounds", "3",
		"-postgres", pg, "-mysql", "off", "-sqlite", "off", "-out", out, "-name", "t",
	}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	if err := run(ctx, opts, &stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "t.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| postgres | 8 | " + variantInbox + " |",
		"| postgres | 8 | " + variantQueue + " |",
		"| postgres | 1 | " + variantProduced1 + " |",
		"plain handler: inbox ÷ business only",
		"go run ./bench -quick",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results lack %q:\n%s", want, md)
		}
	}
	for _, png := range []string{"t-direct-postgres.png", "t-produced-postgres.png"} {
		if fi, err := os.Stat(filepath.Join(out, png)); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", png, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"-rounds", "2"},
		{"-scenarios", "nope"},
		{"-workers", "0"},
		{"-growth-ids", "v5"},
	} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	o, err := parseFlags([]string{"-growth-rows", "1000000,10"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 10, 1000000}; len(o.growthRows) != 3 || o.growthRows[0] != want[0] || o.growthRows[2] != want[2] {
		t.Errorf("growth rows %v, want %v", o.growthRows, want)
	}
	if n := growthRowsOf("v7 keys, 10M rows"); n != 10_000_000 {
		t.Errorf("growthRowsOf: %d", n)
	}
}

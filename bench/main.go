// Command bench measures what the inbox costs: the same business transaction with and without
// the inbox, through a store directly and through a Watermill router, as the inbox grows, while
// retention cleans it up, and with produced messages. Every comparison runs its variants in
// the same process, interleaved round by round, and is reported as a ratio with its spread.
//
// Run it from the repository root:
//
//	go run ./bench -out docs/benchmarks           # the full run, about 15 minutes
//	go run ./bench -quick -out /tmp/bench         # about 2 minutes
//	go run ./bench -scenarios growth -growth-rows 0,1000000,10000000 -name growth-10m
//
// It needs PostgreSQL (INBOX_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test);
// MariaDB/MySQL (INBOX_TEST_MYSQL_DSN) is used when it answers, SQLite always (a temporary
// file). Every table it creates has a random name and is dropped at the end, also after an
// error or Ctrl-C. See docs/benchmarks/README.md for what each scenario measures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// options are the command line.
type options struct {
	out        string
	name       string
	round      time.Duration
	rounds     int
	workers    []int
	scenarios  []string
	growthRows []int64
	growthIDs  []string
	cleanChunk int64
	quick      bool
	postgres   string
	mysql      string
	sqlite     string
	charts     bool
	whatIf     bool
	rev        string
	cpuProfile string
	memProfile string
	args       []string
}

var allScenarios = []string{"direct", "router", "growth", "cleanup", "produced"}

func main() {
	log.SetFlags(log.Ltime)
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stdout); err != nil {
		log.Printf("bench: %v", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "docs/benchmarks", "directory for the Markdown table and the PNG charts")
	fs.StringVar(&o.name, "name", "results", "base name of the output files (<name>.md, <name>-*.png)")
	fs.DurationVar(&o.round, "round", time.Second, "duration of one round of one variant")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds per comparison (at least 3)")
	workers := fs.String("workers", "1,8,32", "concurrent workers, comma-separated")
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "scenarios to run, comma-separated: "+strings.Join(allScenarios, ", "))
	growth := fs.String("growth-rows", "0,1000000", "rows already in the inbox for the growth scenario, comma-separated")
	growthIDs := fs.String("growth-ids", "v4,v7", "kinds of keys for the growth scenario: v4 (random), v7 (time-ordered)")
	fs.Int64Var(&o.cleanChunk, "cleanup-rows", 200_000, "expired rows one cleanup round deletes")
	fs.BoolVar(&o.quick, "quick", false, "short run (about 2 minutes): -round 250ms -rounds 3 -growth-rows 0,100000 -cleanup-rows 20000, unless set")
	fs.StringVar(&o.postgres, "postgres", envOr(testenv.PostgresURLVar, testenv.DefaultPostgresURL), "PostgreSQL URL (required); default from "+testenv.PostgresURLVar)
	fs.StringVar(&o.mysql, "mysql", envOr(testenv.MySQLDSNVar, testenv.DefaultMySQLDSN), "MariaDB/MySQL DSN, or \"off\"; skipped if it does not answer; default from "+testenv.MySQLDSNVar)
	fs.StringVar(&o.sqlite, "sqlite", "", "SQLite database file (default: a temporary file), or \"off\"")
	fs.BoolVar(&o.charts, "charts", true, "write PNG charts")
	fs.StringVar(&o.rev, "rev", "", "the library revision to name in the report (default: git rev-parse of the working tree, if any)")
	fs.BoolVar(&o.whatIf, "whatif", false, "direct scenario on PostgreSQL: add two variants that are not the library (bench/whatif.go): the write-behind commit with the batch's COMMIT spelled \"commit\" and \"COMMIT\"")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["round"] {
			o.round = 250 * time.Millisecond
		}
		if !set["rounds"] {
			o.rounds = 3
		}
		if !set["growth-rows"] {
			*growth = "0,100000"
		}
		if !set["cleanup-rows"] {
			o.cleanChunk = 20_000
		}
	}
	var err error
	if o.workers, err = parseInts(*workers); err != nil {
		return o, fmt.Errorf("-workers: %w", err)
	}
	for _, w := range o.workers {
		if w < 1 {
			return o, fmt.Errorf("-workers: %d is not a worker count", w)
		}
	}
	rows, err := parseInts(*growth)
	if err != nil {
		return o, fmt.Errorf("-growth-rows: %w", err)
	}
	for _, r := range rows {
		o.growthRows = append(o.growthRows, int64(r))
	}
	slices.Sort(o.growthRows)
	o.growthRows = slices.Compact(o.growthRows)
	if len(o.growthRows) == 0 || o.growthRows[0] != 0 {
		o.growthRows = append([]int64{0}, o.growthRows...) // the empty inbox is the baseline
	}
	for _, k := range strings.Split(*growthIDs, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if _, ok := keyKinds[k]; !ok {
			return o, fmt.Errorf("-growth-ids: unknown kind %q (have v4, v7)", k)
		}
		o.growthIDs = append(o.growthIDs, k)
	}
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allScenarios, s) {
			return o, fmt.Errorf("-scenarios: unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
		o.scenarios = append(o.scenarios, s)
	}
	if o.rounds < 3 {
		return o, fmt.Errorf("-rounds %d: want at least 3", o.rounds)
	}
	if o.round <= 0 || o.cleanChunk <= 0 {
		return o, errors.New("-round and -cleanup-rows must be positive")
	}
	o.args = args
	if o.rev == "" {
		o.rev = libraryRevision()
	}
	return o, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func envOr(variable, fallback string) string {
	if v := os.Getenv(variable); v != "" {
		return v
	}
	return fallback
}

// run runs the selected scenarios and writes the report; log lines go to the standard logger,
// the Markdown table also to stdout.
func run(ctx context.Context, o options, stdout io.Writer) (err error) {
	started := time.Now()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	env, err := openEnv(ctx, o)
	if err != nil {
		return err
	}
	defer func() {
		if dropErr := env.close(); dropErr != nil {
			err = errors.Join(err, dropErr)
		}
	}()

	rep := &report{opts: o, env: env}
	for _, s := range o.scenarios {
		log.Printf("scenario %s", s)
		var err error
		switch s {
		case "direct":
			err = runDirect(ctx, env, rep)
		case "router":
			err = runRouter(ctx, env, rep)
		case "growth":
			err = runGrowth(ctx, env, rep)
		case "cleanup":
			err = runCleanup(ctx, env, rep)
		case "produced":
			err = runProduced(ctx, env, rep)
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s, err)
		}
	}
	rep.elapsed = time.Since(started)

	if o.memProfile != "" {
		f, err := os.Create(o.memProfile)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			f.Close()
			return err
		}
		f.Close()
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var charts []string
	if o.charts {
		if charts, err = rep.writeCharts(o.out); err != nil {
			return fmt.Errorf("charts: %w", err)
		}
	}
	md := rep.markdown(charts)
	path := filepath.Join(o.out, o.name+".md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, md)
	log.Printf("wrote %s (%s)", path, rep.elapsed.Round(time.Second))
	return nil
}

// libraryRevision names the commit of the working tree and whether the library's files (all
// but bench/ and docs/) differ from it; "unknown" outside a git checkout.
func libraryRevision() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)bench", ":(exclude,top)docs", ":(exclude,top)go.work", ":(exclude,top)go.work.sum").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}

// goVersion is runtime.Version, kept here so that the report can name it.
var goVersion = runtime.Version()

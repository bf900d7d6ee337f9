// Command bench measures what the inbox costs a handler: the same business transaction
// alone, in a hand-written inbox and in this inbox's modes, on PostgreSQL at several network
// round-trip times (through a delaying TCP proxy in this process) and on MySQL/MariaDB and
// SQLite; and, on PostgreSQL, through a Watermill router, as the inbox grows, while
// retention cleans it up, and with produced messages. Every comparison runs its variants in
// the same process, interleaved round by round, and is reported as a ratio with its spread.
//
// Run it from the repository root:
//
//	go run ./bench -out docs/benchmarks           # the full run, about 10 minutes
//	go run ./bench -quick -out /tmp/bench         # about 2 minutes
//	go run ./bench -scenarios cost -workers 8 -delays 250us
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// options are the command line.
type options struct {
	out, name       string
	round           time.Duration
	rounds          int
	workers         []int
	delays          []time.Duration
	poolerDelays    []time.Duration
	pipelineDelays  []time.Duration
	scenarios       []string
	cleanChunk      int64
	postgres, mysql string
	sqlite, rev     string
	charts          bool
	args            []string
}

// runners are the scenarios, in the order of a full run.
var runners = []struct {
	name string
	run  func(context.Context, *env, *report) error
}{{"cost", runCost}, {"router", runRouter}, {"cleanup", runCleanup}, {"produced", runProduced}, {"pooler", runPooler}, {"pipeline", runPipeline}, {"marks", runMarks}, {"http", runHTTP}}

func main() {
	log.SetFlags(log.Ltime)
	if spec := os.Getenv(proxyEnv); spec != "" {
		if err := serveDelayProxy(spec); err != nil {
			log.Fatal(err)
		}
		return
	}
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
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
	o := options{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "docs/benchmarks", "directory for the Markdown table and the PNG charts")
	fs.StringVar(&o.name, "name", "results", "base name of the output files (<name>.md, <name>-*.png)")
	fs.DurationVar(&o.round, "round", time.Second, "duration of one round of one variant")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds per comparison (at least 3)")
	workers := fs.String("workers", "8,32", "concurrent workers, comma-separated")
	delays := fs.String("delays", "0,250us,1ms", "cost scenario: delay added to each direction between the benchmark and PostgreSQL, comma-separated; 0 is a straight connection")
	poolerDelays := fs.String("pooler-delays", "250us", "pooler scenario: delay added to each direction between the benchmark and PgBouncer, comma-separated")
	pipelineDelays := fs.String("pipeline-delays", "250us,1ms", "pipeline and marks scenarios: delay added to each direction between the benchmark and PostgreSQL, comma-separated")
	names := make([]string, len(runners))
	for i, r := range runners {
		names[i] = r.name
	}
	scenarios := fs.String("scenarios", strings.Join(names, ","), "scenarios to run, comma-separated")
	fs.Int64Var(&o.cleanChunk, "cleanup-rows", 200_000, "expired rows one cleanup round deletes")
	quick := fs.Bool("quick", false, "short run (about 2 minutes): -round 250ms -rounds 3 -cleanup-rows 20000, unless set")
	fs.StringVar(&o.postgres, "postgres", envOr(testenv.PostgresURLVar, testenv.DefaultPostgresURL), "PostgreSQL URL (required)")
	fs.StringVar(&o.mysql, "mysql", envOr(testenv.MySQLDSNVar, testenv.DefaultMySQLDSN), "MariaDB/MySQL DSN, or \"off\"; skipped if it does not answer")
	fs.StringVar(&o.sqlite, "sqlite", "", "SQLite database file (default: a temporary file), or \"off\"")
	fs.BoolVar(&o.charts, "charts", true, "write PNG charts")
	fs.StringVar(&o.rev, "rev", libraryRevision(), "the library revision to name in the report")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, value := range map[string]string{"round": "250ms", "rounds": "3", "cleanup-rows": "20000"} {
			if !set[name] {
				_ = fs.Set(name, value)
			}
		}
	}
	var err error
	positive := func(n int) bool { return n > 0 }
	if o.workers, err = list("-workers", *workers, strconv.Atoi, positive); err != nil {
		return o, err
	}
	if o.delays, err = list("-delays", *delays, time.ParseDuration, func(d time.Duration) bool { return d >= 0 }); err != nil {
		return o, err
	}
	if o.poolerDelays, err = list("-pooler-delays", *poolerDelays, time.ParseDuration, func(d time.Duration) bool { return d >= 0 }); err != nil {
		return o, err
	}
	if o.pipelineDelays, err = list("-pipeline-delays", *pipelineDelays, time.ParseDuration, func(d time.Duration) bool { return d >= 0 }); err != nil {
		return o, err
	}
	o.scenarios = strings.Split(*scenarios, ",")
	for _, s := range o.scenarios {
		if !slices.Contains(names, s) {
			return o, fmt.Errorf("-scenarios: unknown scenario %q", s)
		}
	}
	if o.rounds < 3 || o.round <= 0 || o.cleanChunk <= 0 {
		return o, errors.New("want -rounds at least 3, -round and -cleanup-rows positive")
	}
	return o, nil
}

// list parses a comma-separated flag value into sorted, distinct values that pass ok.
func list[T interface{ ~int | ~int64 }](flagName, s string, parse func(string) (T, error), ok func(T) bool) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil || !ok(v) {
			return nil, fmt.Errorf("%s: bad value %q", flagName, f)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
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
	env, err := openEnv(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.close()) }()
	rep := &report{opts: o, env: env}
	for _, r := range runners {
		if slices.Contains(o.scenarios, r.name) {
			log.Printf("scenario %s", r.name)
			if err := r.run(ctx, env, rep); err != nil {
				return fmt.Errorf("scenario %s: %w", r.name, err)
			}
		}
	}
	rep.elapsed = time.Since(started)
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
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)bench", ":(exclude,top)docs").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}

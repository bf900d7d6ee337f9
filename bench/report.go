package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// row is one variant of one comparison at one worker count.
type row struct {
	scenario, db string
	workers      int
	variant      string
	baseline     string // the variant the ratio is to; "" for the baseline itself
	rate         spread // messages (or claims) per second, over the rounds
	ratio        spread // rate / baseline's rate, per round
	allocs       float64
	kib          float64
	writes       float64 // PostgreSQL socket writes per message; < 0: not PostgreSQL
}

// derived is a figure computed from a comparison's rounds, other than a ratio to its baseline.
type derived struct {
	scenario, db string
	workers      int
	name         string
	s            spread
	unit         string
}

type growthPoint struct {
	ids     string
	rows    int64
	workers int
	rate    spread
}

type report struct {
	opts    options
	env     *env
	elapsed time.Duration
	rows    []row
	derived []derived
	notes   map[string][]string
	growth  []growthPoint
}

func (r *report) note(scenario, format string, args ...any) {
	if r.notes == nil {
		r.notes = map[string][]string{}
	}
	r.notes[scenario] = append(r.notes[scenario], fmt.Sprintf(format, args...))
}

// add records a comparison: names[i] ran results[i]; names[base] is the baseline.
func (r *report) add(scenario, db string, workers int, names []string, results [][]roundResult, base int) {
	for i, name := range names {
		rw := row{
			scenario: scenario, db: db, workers: workers, variant: name,
			rate:   spreadOf(rates(results[i])),
			allocs: perMsg(results[i], func(x roundResult) float64 { return float64(x.allocs) }),
			kib:    perMsg(results[i], func(x roundResult) float64 { return float64(x.bytes) / 1024 }),
			writes: -1,
		}
		if db == "postgres" {
			rw.writes = perMsg(results[i], func(x roundResult) float64 { return float64(x.writes) })
		}
		if i != base {
			rw.baseline = names[base]
			rw.ratio = spreadOf(ratios(results[i], results[base]))
		}
		r.rows = append(r.rows, rw)
	}
}

func (r *report) addDerived(scenario, db string, workers int, name, unit string, xs []float64) {
	r.derived = append(r.derived, derived{scenario: scenario, db: db, workers: workers, name: name, unit: unit, s: spreadOf(xs)})
}

func (r *report) findRow(scenario, db string, workers int, variant string) (row, bool) {
	for _, x := range r.rows {
		if x.scenario == scenario && x.db == db && x.workers == workers && x.variant == variant {
			return x, true
		}
	}
	return row{}, false
}

func (r *report) findDerived(scenario, db string, workers int, name string) (derived, bool) {
	for _, x := range r.derived {
		if x.scenario == scenario && x.db == db && x.workers == workers && x.name == name {
			return x, true
		}
	}
	return derived{}, false
}

var scenarioTitles = map[string]string{
	"direct":   "1. Direct store: business transaction with and without the inbox",
	"router":   "2. Through a Watermill router (gochannel)",
	"growth":   "3. Growth: claims with rows already in the inbox",
	"cleanup":  "4. Cleanup: retention while claims run",
	"produced": "5. Produced messages: 1 output vs 0",
}

var scenarioDescriptions = map[string]string{
	"direct": "Each message is one business transaction that INSERTs one invoice row. " +
		"*business only*: BEGIN; INSERT; COMMIT through the pool, no inbox. " +
		"*inbox*: the inbox middleware claims the message, the handler INSERTs through `inbox.TxFromContext`. " +
		"*inbox + Queue*: the handler queues the INSERT with `inbox.Queue` (write-behind). " +
		"*inbox, half duplicates*: every other message has a key that is already committed. " +
		"*inbox, duplicates only*: every message is a duplicate; the handler never runs. " +
		"The middleware is called directly (no router), with a fixed consumer name. " +
		"Ratios are to *business only*, per round.",
	"router": "K workers = K topics with one handler each: gochannel with `BlockPublishUntilSubscriberAck` lets one " +
		"message per topic be in flight, so K publishers (one per topic, each blocked until the ack) give K-way concurrency. " +
		"Every handler runs the same business INSERT. *no dedup*: the handler begins and commits its own transaction. " +
		"*Deduplicator (memory)*: Watermill's `middleware.Deduplicator` with a UUID key " +
		"(its default key is an Adler-32 of the payload) and the in-memory repository: not durable, the reference for what dedup can cost. " +
		"*inbox*: this middleware, the handler INSERTs through `inbox.TxFromContext`. Ratios are to *no dedup*.",
	"growth": "Claims (inbox middleware, handler does nothing: claim + COMMIT) into an inbox that already holds N rows of the same consumer, " +
		"filled with one `INSERT ... SELECT generate_series` and then `VACUUM ANALYZE`d. *v4*: random keys (`uuid.NewString`); " +
		"*v7*: time-ordered keys (`uuid.NewV7`), the filled rows being older v7-shaped ids. " +
		"Ratios are to the empty inbox with the same kind of key, interleaved in the same run.",
	"cleanup": "An inbox filled with expired rows in chunks of different ages; each round, `PgxStore.Cleanup` " +
		"(default batches of 10,000 rows) deletes one chunk while the workers claim new messages (claim + COMMIT, no business write) " +
		"into the same table. *claims alone* runs the same claims for one round without a cleanup, interleaved. " +
		"A third variant, interleaved too, deletes a chunk with no claims running. " +
		"Rows/s is the chunk divided by the cleanup's wall time.",
	"produced": "The inbox handler INSERTs one invoice and returns 0 or 1 message (a 100-byte payload, two metadata entries); " +
		"with 1, the middleware records it with the claim (an UPDATE sent in the COMMIT batch on pgx). " +
		"Called directly, so nothing is published: this is what recording costs.",
}

func (r *report) markdown(charts []string) string {
	var b strings.Builder
	o := r.opts
	fmt.Fprintf(&b, "# Inbox benchmark results\n\n")
	fmt.Fprintf(&b, "Generated %s by\n\n```\ngo run ./bench %s\n```\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(o.args, " "))
	fmt.Fprintf(&b, "| machine | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| CPU | %d × %s |\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(&b, "| memory | %s |\n", memTotal())
	fmt.Fprintf(&b, "| library | %s |\n", o.rev)
	fmt.Fprintf(&b, "| Go | %s %s/%s |\n", goVersion, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "| PostgreSQL | %s |\n", r.env.pgInfo)
	if r.env.mysql != nil {
		fmt.Fprintf(&b, "| MariaDB/MySQL | %s |\n", r.env.myInfo)
	}
	if r.env.sqlite != nil {
		fmt.Fprintf(&b, "| SQLite | %s |\n", r.env.liteInfo)
	}
	fmt.Fprintf(&b, "| rounds | %d interleaved rounds of %s per variant, mirrored order |\n", o.rounds, o.round)
	fmt.Fprintf(&b, "| run time | %s |\n\n", r.elapsed.Round(time.Second))
	b.WriteString("The machine is shared with other jobs, so absolute throughput drifts; the ratios, " +
		"taken per round between variants that ran seconds apart, are the figures to read. " +
		"*ratio* is the median over the rounds of (variant's msgs/s ÷ baseline's msgs/s in the same round), " +
		"with the minimum and maximum in brackets. allocs/msg and KiB/msg count this Go process only " +
		"(benchmark driver included); PG writes/msg counts writes to PostgreSQL sockets, which is the " +
		"number of round trips (pgx sends a request or a pipelined batch with one write).\n\n")

	if t := r.targets(); t != "" {
		b.WriteString("## Targets (PostgreSQL, 8 workers)\n\n")
		b.WriteString(t)
		b.WriteString("\n")
	}

	for _, s := range allScenarios {
		var rows []row
		for _, x := range r.rows {
			if x.scenario == s {
				rows = append(rows, x)
			}
		}
		var ders []derived
		for _, x := range r.derived {
			if x.scenario == s {
				ders = append(ders, x)
			}
		}
		if len(rows) == 0 && len(ders) == 0 && len(r.notes[s]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", scenarioTitles[s], scenarioDescriptions[s])
		if len(rows) > 0 {
			b.WriteString("| DB | workers | variant | msgs/s (median) | ratio [min–max] | allocs/msg | KiB/msg | PG writes/msg |\n")
			b.WriteString("| --- | ---: | --- | ---: | --- | ---: | ---: | ---: |\n")
			for _, x := range rows {
				ratio := "baseline"
				if x.baseline != "" {
					ratio = fmt.Sprintf("**%.2f** [%.2f–%.2f]", x.ratio.med, x.ratio.min, x.ratio.max)
				}
				writes := "–"
				if x.writes >= 0 {
					writes = fmt.Sprintf("%.2f", x.writes)
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %s | %.0f | %.1f | %s |\n",
					x.db, x.workers, x.variant, x.rate.med, ratio, x.allocs, x.kib, writes)
			}
			b.WriteString("\n")
		}
		if len(ders) > 0 {
			b.WriteString("| DB | workers | measure | median | min–max | IQR |\n| --- | ---: | --- | ---: | --- | --- |\n")
			for _, x := range ders {
				f := "%.2f"
				if x.s.med >= 100 {
					f = "%.0f"
				}
				fmt.Fprintf(&b, "| %s | %d | %s | "+f+"%s | "+f+"–"+f+" | "+f+"–"+f+" |\n",
					x.db, x.workers, x.name, x.s.med, x.unit, x.s.min, x.s.max, x.s.q1, x.s.q3)
			}
			b.WriteString("\n")
		}
		for _, n := range r.notes[s] {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		if len(r.notes[s]) > 0 {
			b.WriteString("\n")
		}
		for _, c := range charts {
			if strings.Contains(c, "-"+s) {
				fmt.Fprintf(&b, "![%s](%s)\n\n", c, c)
			}
		}
	}
	return b.String()
}

// targets renders the targets with what this run measured.
func (r *report) targets() string {
	type target struct {
		name, want string
		got        string
		met        string
	}
	var ts []target
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	if x, ok := r.findRow("direct", "postgres", 8, variantInbox); ok {
		ts = append(ts, target{"plain handler: inbox ÷ business only", "≥ 0.80", ratioText(x.ratio), yes(x.ratio.med >= 0.80)})
	}
	if x, ok := r.findRow("direct", "postgres", 8, variantQueue); ok {
		ts = append(ts, target{"write-behind (inbox.Queue) ÷ business only", "≥ 0.85", ratioText(x.ratio), yes(x.ratio.med >= 0.85)})
	}
	if x, ok := r.findDerived("direct", "postgres", 8, derivedDupCost); ok {
		ts = append(ts, target{"time of a duplicate ÷ time of a first delivery", "≤ 0.50", ratioText(x.s), yes(x.s.med <= 0.50)})
	}
	var big growthTargetRow
	for _, x := range r.rows {
		if x.scenario == "growth" && x.db == "postgres" && x.workers == 8 && strings.HasPrefix(x.variant, "v7") && x.baseline != "" {
			if n := growthRowsOf(x.variant); n >= big.rows {
				big = growthTargetRow{rows: n, row: x}
			}
		}
	}
	if big.rows > 0 {
		name := fmt.Sprintf("v7 keys: %s-row inbox ÷ empty inbox", humanRows(big.rows))
		if big.rows < 10_000_000 {
			name += " (target is at 10M; this run stopped at " + humanRows(big.rows) + ")"
		}
		ts = append(ts, target{name, "≥ 0.80", ratioText(big.row.ratio), yes(big.row.ratio.med >= 0.80)})
	}
	if x, ok := r.findDerived("router", "postgres", 8, derivedRouterVsDedup); ok {
		ts = append(ts, target{"router: inbox ÷ in-memory Deduplicator", "≥ 0.80", ratioText(x.s), yes(x.s.med >= 0.80)})
	}
	if x, ok := r.findDerived("cleanup", "postgres", 8, derivedCleanupRate); ok {
		ts = append(ts, target{"cleanup rows deleted per second, claims running", "≥ 200,000", fmt.Sprintf("%.0f [%.0f–%.0f]", x.s.med, x.s.min, x.s.max), yes(x.s.med >= 200_000)})
	}
	if x, ok := r.findRow("cleanup", "postgres", 8, variantDuringCleanup); ok {
		ts = append(ts, target{"claims during cleanup ÷ claims alone", "≥ 0.80", ratioText(x.ratio), yes(x.ratio.med >= 0.80)})
	}
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| target | wanted | measured: median [min–max] | |\n| --- | --- | --- | --- |\n")
	for _, t := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.name, t.want, t.got, t.met)
	}
	return b.String()
}

type growthTargetRow struct {
	rows int64
	row  row
}

func ratioText(s spread) string {
	return fmt.Sprintf("**%.2f** [%.2f–%.2f] (%d rounds)", s.med, s.min, s.max, s.n)
}

func humanRows(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			if _, v, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}

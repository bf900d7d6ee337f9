package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// at says where a figure was measured.
type at struct {
	scenario, db string
	delay        time.Duration // added each way by the delay proxy
	rtt          time.Duration // measured round trip; 0: not measured
	workers      int
}

// row is one variant of one comparison.
type row struct {
	at
	variant  string
	baseline string // the variant the ratio is to; "" for the baseline itself
	rate     spread // messages per second, over the rounds
	ratio    spread // rate ÷ the baseline's rate, per round
	allocs   float64
	trips    float64 // socket writes (round trips) per message; < 0: not counted
	// CPU µs per message of the benchmark's process and of the database server; server
	// < 0: not measured (SQLite runs in the benchmark's process).
	cpuSelf, cpuServer float64
}

// derived is a figure computed from a comparison's rounds, other than a ratio to its baseline.
type derived struct {
	at
	name string
	s    spread
	unit string
}

const dWBvsHand = "WriteBehind ÷ hand-written inbox"

type report struct {
	opts    options
	env     *env
	elapsed time.Duration
	rows    []row
	derived []derived
	notes   map[string][]string
}

func (r *report) note(scenario, format string, args ...any) {
	if r.notes == nil {
		r.notes = map[string][]string{}
	}
	r.notes[scenario] = append(r.notes[scenario], fmt.Sprintf(format, args...))
}

// add records a comparison: names[i] ran results[i]; names[base] is the baseline.
func (r *report) add(a at, names []string, results [][]roundResult, base int) {
	for i, name := range names {
		rw := row{at: a, variant: name, rate: spreadOf(rates(results[i])), trips: -1,
			allocs:    perMsg(results[i], func(x roundResult) float64 { return float64(x.allocs) }),
			cpuSelf:   perMsg(results[i], func(x roundResult) float64 { return float64(x.cpu.self.Microseconds()) }),
			cpuServer: -1}
		if a.db != "sqlite" {
			rw.trips = perMsg(results[i], func(x roundResult) float64 { return float64(x.writes) })
			rw.cpuServer = perMsg(results[i], func(x roundResult) float64 { return float64(x.cpu.server.Microseconds()) })
		}
		if i != base {
			rw.baseline = names[base]
			rw.ratio = spreadOf(ratios(results[i], results[base]))
		}
		r.rows = append(r.rows, rw)
	}
}

func (r *report) addDerived(a at, name string, xs []float64) {
	r.addDerivedUnit(a, name, "", xs)
}

func (r *report) addDerivedUnit(a at, name, unit string, xs []float64) {
	r.derived = append(r.derived, derived{at: a, name: name, unit: unit, s: spreadOf(xs)})
}

func (r *report) find(scenario, db string, delay time.Duration, workers int, variant string) (row, bool) {
	for _, x := range r.rows {
		if x.scenario == scenario && x.db == db && x.delay == delay && x.workers == workers && x.variant == variant {
			return x, true
		}
	}
	return row{}, false
}

func (r *report) findDerived(scenario string, delay time.Duration, workers int, name string) (derived, bool) {
	return r.findDerivedOn(scenario, "postgres", delay, workers, name)
}

// findDerivedOn is findDerived on database db.
func (r *report) findDerivedOn(scenario, db string, delay time.Duration, workers int, name string) (derived, bool) {
	for _, x := range r.derived {
		if x.scenario == scenario && x.db == db && x.delay == delay && x.workers == workers && x.name == name {
			return x, true
		}
	}
	return derived{}, false
}

var scenarios = []struct{ name, title, description string }{
	{"cost", "1. What the inbox costs a handler, at network round-trip times",
		"Each message is one business transaction that INSERTs one invoice row, called by N workers with no router. " +
			"PostgreSQL and MariaDB are reached straight (loopback) and through a TCP proxy (a niced child process) that delays each direction " +
			"(0.25 ms each way: a 0.5 ms round trip, as between hosts in one data centre); *RTT* is the measured median round trip of an empty query, " +
			"the proxy's extra hops and the loopback included. " +
			"*business alone*: BEGIN; INSERT; COMMIT, no inbox. " +
			"*hand-written inbox*: what a team writes without a library: BEGIN; INSERT INTO inbox ... ON CONFLICT DO NOTHING RETURNING 1; INSERT; COMMIT " +
			"(MySQL: INSERT IGNORE, SQLite: ON CONFLICT DO NOTHING, both reading the affected rows), into a table of the same shape as the library's. " +
			"*hand-written inbox, claim sent with BEGIN*: the same, with BEGIN and the claim in one pgx batch: 3 round trips, the fewest for a handler that writes in the claim's transaction, and the least such an inbox can cost (PostgreSQL only). " +
			"*inbox, TxFromContext*: the middleware claims, the handler INSERTs through `inbox.TxFromContext`. " +
			"*inbox, ExecAtCommit*: the handler queues the INSERT with `inbox.ExecAtCommit`; it travels with COMMIT. " +
			"*inbox, WriteBehind*: `inbox.Config{WriteBehind: true}`; the handler runs first and queues the INSERT, and on pgx BEGIN, the claim, the INSERT and COMMIT go in one batch (on MariaDB in one multi-statement request, on `sqlinbox.NewMultiStatement`'s store). " +
			"*inbox, duplicates only*: every message's key is already committed, sent to the WriteBehind handler, which runs first; its queued INSERT must not apply (each round counts the business rows). " +
			"Ratios are to *business alone* in the same round. Round trips are requests written to the database's socket per message; a connection's startup, authentication and statement preparation are not counted."},
	{"router", "2. Through a Watermill router (gochannel)",
		"K workers = K topics with one handler each (gochannel with `BlockPublishUntilSubscriberAck` has one message per topic in flight). " +
			"Every handler runs the same business INSERT. *no dedup*: the handler's own transaction. *Deduplicator (memory)*: Watermill's " +
			"`middleware.Deduplicator` keyed by UUID with its in-memory repository, not durable. *inbox*: this middleware, INSERT through `TxFromContext`. Loopback."},
	{"cleanup", "3. Cleanup: retention while claims run",
		"An inbox filled with expired rows in chunks of different ages; each round `Store.Cleanup` deletes one chunk while the workers claim " +
			"into the same table, against the same claims alone, interleaved. Loopback."},
	{"produced", "4. Produced messages: 1 output vs 0",
		"The handler INSERTs through `TxFromContext` and returns 0 or 1 message (100 bytes, two metadata entries), recorded with the claim. Loopback."},
	{"pooler", "5. Behind a connection pooler (PgBouncer, transaction mode)",
		"The cost scenario's variants through PgBouncer 1.18 in `pool_mode = transaction` with 4 server connections, the delay proxy between the benchmark and PgBouncer " +
			"(0.25 ms each way), for the two pgx modes that work there: `QueryExecModeExec` and `QueryExecModeSimpleProtocol` (docs/pooler.md). " +
			"*business alone* goes through the same pooler. PgBouncer runs on this machine, so its CPU is in neither CPU column."},
	{"pipeline", "6. Pipelined: the write-behind requests of concurrent messages on few connections",
		"Write-behind mode (the handler queues its INSERT with `inbox.ExecAtCommit`) on two stores, interleaved: `sqlinbox.NewPgx`, which sends each message's BEGIN, claim, INSERT and COMMIT " +
			"in one batch on a connection of its own (one round trip, one connection per message in flight), and `sqlinbox.NewPgxPipeline` with " +
			"`PipelineConfig{Connections: 8, Messages: 8}`, which sends the claims and INSERTs of the messages in flight at once in one pipeline per connection, a Sync after each message. " +
			"*N in flight*: N workers deliver one message each at a time, as a router with N deliveries in flight does. *workers* is the 8 connections both stores' main variants use: " +
			"write-behind holds one per message, so 8 connections carry 8 messages in flight; the pipelined store carries up to 8 per connection, 64 in flight. " +
			"*write-behind, 32 in flight* (32 connections) against *pipelined, 32 in flight* (8), and the two *8 in flight*, compare at equal messages in flight; the 1-in-flight pair is the latency of a lone delivery. " +
			"Ratios are to *write-behind, 8 in flight* in the same round; latency is each message's time through the middleware, its 50th and 99th percentile per round " +
			"(median over the rounds [min–max]). " +
			"On MariaDB the same variants compare `sqlinbox.NewMultiStatement`'s write-behind mode (one multi-statement request per message) with " +
			"`sqlinbox.NewMultiStatementCoalesced` (`PipelineConfig{Connections: 8, Messages: 8}`: the transactions of the messages in flight at once in one multi-statement request per connection), " +
			"named *coalesced*, and its floor, *hand-written multi-statement requests, 64 in flight*: 8 connections, each sending requests of 8 transactions " +
			"(START TRANSACTION; INSERT IGNORE claim; INSERT; COMMIT) written by hand, with no duplicate check, no statement count and no marker between them: " +
			"what the machine allows such a request, with each message still its own transaction and its own log flush."},
	{"marks", "7. Unpublished marks: a handler that publishes, with and without them",
		"Write-behind mode on `sqlinbox.NewPgx`; the handler queues the invoice INSERT with `inbox.ExecAtCommit` and publishes one event (100 bytes) through an `inbox.Publisher` " +
			"to a broker that takes it at once. *marks*: the table has the column `unpublished`: the claim's INSERT carries the record and sets the mark, and the store clears the marks of up to 500 " +
			"deliveries in one UPDATE on the pool (through the same delay proxy). *no marks*: the same handler on a table made without the column. *business alone*: the INSERT in a " +
			"transaction of its own, no inbox, sent statement by statement. Ratios are to *no marks* in the same round."},
	{"http", "8. HTTP requests with an Idempotency-Key (inboxhttp)",
		"N HTTP clients on loopback POST to an endpoint that creates one invoice, each request with a new `Idempotency-Key`; PostgreSQL is reached through the delay proxy. " +
			"*endpoint alone, no inbox*: the handler runs BEGIN; INSERT; COMMIT itself. *inboxhttp, TxFromContext*: behind `inboxhttp.NewMiddleware`, the handler INSERTs " +
			"through `inbox.TxFromContext`; the response is recorded with the claim and sent after COMMIT. *inboxhttp, WriteBehind*: the handler defers the INSERT " +
			"with `inbox.ExecAtCommit`, and the claim, the INSERT, the record and COMMIT go in one batch. Ratios are to *endpoint alone* in the same round."},
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// where names a database and its distance: "postgres, RTT 0.56 ms (+0.25 ms each way)".
func (a at) where() string {
	switch {
	case a.delay > 0:
		return fmt.Sprintf("%s, RTT %s (+%s each way)", a.db, ms(a.rtt), ms(a.delay))
	case a.rtt > 0:
		return fmt.Sprintf("%s, loopback, RTT %s", a.db, ms(a.rtt))
	}
	return a.db
}

func (r *report) markdown(charts []string) string {
	var b strings.Builder
	o, e := r.opts, r.env
	fmt.Fprintf(&b, "# Inbox benchmark results\n\nGenerated %s by\n\n```\ngo run ./bench %s\n```\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(o.args, " "))
	fmt.Fprintf(&b, "| | |\n| --- | --- |\n| machine | %d cores, shared with other jobs |\n| library | %s |\n| Go | %s |\n| PostgreSQL | %s |\n",
		runtime.NumCPU(), o.rev, runtime.Version(), e.pgInfo)
	if e.mysql != nil {
		fmt.Fprintf(&b, "| MariaDB/MySQL | %s |\n", e.myInfo)
	}
	if e.sqlite != nil {
		fmt.Fprintf(&b, "| SQLite | %s |\n", e.liteInfo)
	}
	fmt.Fprintf(&b, "| rounds | %d interleaved rounds of %s per variant, mirrored order |\n| run time | %s |\n\n",
		o.rounds, o.round, r.elapsed.Round(time.Second))
	b.WriteString("Absolute throughput on a shared machine drifts; the ratios, taken per round between variants that ran " +
		"seconds apart, are the figures to read: the median over the rounds with the minimum and maximum in brackets. " +
		"allocs/msg counts the benchmark's process (the delay proxy runs in another). CPU µs/msg is user + system time per message over all rounds, " +
		"of the benchmark's process (client: the library, the driver, the workers) and of the database server's processes " +
		"(all of them, the WAL writer included); the delay proxy's is in neither.\n\n")
	if t := r.targets(); t != "" {
		b.WriteString("## Targets (PostgreSQL, 8 workers)\n\n" + t + "\n")
	}
	for _, s := range scenarios {
		rows := slices.DeleteFunc(slices.Clone(r.rows), func(x row) bool { return x.scenario != s.name })
		ders := slices.DeleteFunc(slices.Clone(r.derived), func(x derived) bool { return x.scenario != s.name })
		if len(rows) == 0 && len(ders) == 0 {
			continue
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", s.title, s.description)
		if s.name == "cost" {
			for _, db := range []string{"postgres", "mysql"} {
				for _, w := range o.workers {
					b.WriteString(r.costSummary(db, w))
				}
			}
		}
		if len(rows) > 0 {
			b.WriteString("| where | workers | variant | msgs/s (median) | ÷ baseline [min–max] | round trips/msg | allocs/msg | CPU µs/msg: client, server |\n| --- | ---: | --- | ---: | --- | ---: | ---: | ---: |\n")
			for _, x := range rows {
				ratio, trips, server := "baseline", "–", "–"
				if x.baseline != "" {
					ratio = fmt.Sprintf("**%.2f** [%.2f–%.2f]", x.ratio.med, x.ratio.min, x.ratio.max)
				}
				if x.trips >= 0 {
					trips = fmt.Sprintf("%.2f", x.trips)
				}
				if x.cpuServer >= 0 {
					server = fmt.Sprintf("%.0f", x.cpuServer)
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %s | %s | %.0f | %.0f, %s |\n", x.where(), x.workers, x.variant, x.rate.med, ratio, trips, x.allocs, x.cpuSelf, server)
			}
			b.WriteString("\n")
		}
		if len(ders) > 0 {
			b.WriteString("| where | workers | measure | median [min–max] |\n| --- | ---: | --- | --- |\n")
			for _, x := range ders {
				f := "%.2f"
				if x.s.med >= 100 {
					f = "%.0f"
				}
				fmt.Fprintf(&b, "| %s | %d | %s | "+f+"%s ["+f+"–"+f+"] |\n", x.where(), x.workers, x.name, x.s.med, x.unit, x.s.min, x.s.max)
			}
			b.WriteString("\n")
		}
		for _, n := range r.notes[s.name] {
			fmt.Fprintf(&b, "- %s\n\n", n)
		}
		for _, c := range charts {
			if strings.Contains(c, "-"+s.name) {
				fmt.Fprintf(&b, "![%s](%s)\n\n", c, c)
			}
		}
	}
	return b.String()
}

// costSummary is the cost scenario on db ("postgres", "mysql") at one worker count: a
// variant per line, a round-trip time per column. Empty if db did not run.
func (r *report) costSummary(db string, workers int) string {
	if _, ok := r.find("cost", db, r.opts.delays[0], workers, vBusiness); !ok {
		return ""
	}
	var b strings.Builder
	title := map[string]string{"postgres": "PostgreSQL", "mysql": "MariaDB/MySQL"}[db]
	fmt.Fprintf(&b, "%s, %d workers, ÷ business alone (median of the rounds) and msgs/s:\n\n| variant | round trips/msg |", title, workers)
	for _, d := range r.opts.delays {
		if x, ok := r.find("cost", db, d, workers, vBusiness); ok {
			fmt.Fprintf(&b, " RTT %s |", ms(x.rtt))
		}
	}
	b.WriteString("\n| --- | ---: |" + strings.Repeat(" ---: |", len(r.opts.delays)) + "\n")
	for _, v := range []string{vBusiness, vHand, vPiped, vTx, vQueue, vTxText, vQueueText, vWB, vDup} {
		line := ""
		for _, d := range r.opts.delays {
			x, ok := r.find("cost", db, d, workers, v)
			if !ok {
				continue
			}
			if line == "" {
				line = fmt.Sprintf("| %s | %.2f |", v, x.trips)
			}
			if x.baseline == "" {
				line += fmt.Sprintf(" 1.00 (%.0f/s) |", x.rate.med)
			} else {
				line += fmt.Sprintf(" **%.2f** (%.0f/s) |", x.ratio.med, x.rate.med)
			}
		}
		if line != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String() + "\n"
}

// targets renders the targets this run can check with what it measured.
func (r *report) targets() string {
	var b strings.Builder
	check := func(name, want string, s spread, ok bool) {
		verdict := "met"
		if !ok {
			verdict = "**missed**"
		}
		f := "%.2f"
		if s.med >= 100 {
			f = "%.0f"
		}
		fmt.Fprintf(&b, "| %s | %s | **"+f+"** ["+f+"–"+f+"] (%d rounds) | %s |\n", name, want, s.med, s.min, s.max, s.n, verdict)
	}
	const halfMillisecond = 250 * time.Microsecond
	if x, ok := r.find("cost", "postgres", halfMillisecond, 8, vWB); ok {
		check(fmt.Sprintf("RTT %s: WriteBehind ÷ business alone", ms(x.rtt)), "≥ 1.8", x.ratio, x.ratio.med >= 1.8)
	}
	if x, ok := r.findDerived("cost", halfMillisecond, 8, dWBvsHand); ok {
		check(fmt.Sprintf("RTT %s: WriteBehind ÷ hand-written inbox", ms(x.rtt)), "≥ 2.3", x.s, x.s.med >= 2.3)
	}
	if x, ok := r.find("cost", "postgres", halfMillisecond, 8, vTx); ok {
		check(fmt.Sprintf("RTT %s: TxFromContext ÷ business alone", ms(x.rtt)), "≥ 0.95", x.ratio, x.ratio.med >= 0.95)
	}
	if x, ok := r.find("cost", "postgres", 0, 8, vWB); ok {
		check("loopback: WriteBehind ÷ business alone", "≥ 0.95", x.ratio, x.ratio.med >= 0.95)
	}
	if _, ok := r.find("cost", "postgres", 0, 8, vWB); ok {
		for _, d := range r.opts.delays {
			if x, ok := r.find("cost", "postgres", d, 8, vDup); ok {
				fmt.Fprintf(&b, "| %s: round trips of a WriteBehind duplicate | ≤ 2 | **%.2f** | %s |\n", x.where(), x.trips, map[bool]string{true: "met", false: "**missed**"}[x.trips <= 2])
			}
		}
	}
	for _, t := range []struct {
		variant string
		want    float64
	}{{vTxText, 0.95}, {vQueueText, 1.3}, {vWB, 1.8}} {
		if x, ok := r.find("cost", "mysql", halfMillisecond, 8, t.variant); ok {
			check(fmt.Sprintf("MariaDB/MySQL, RTT %s: %s ÷ business alone", ms(x.rtt), t.variant), fmt.Sprintf("≥ %.2g", t.want), x.ratio, x.ratio.med >= t.want)
		}
	}
	if x, ok := r.find("cost", "mysql", halfMillisecond, 8, vDup); ok {
		fmt.Fprintf(&b, "| %s: round trips of a WriteBehind duplicate | ≤ 2 | **%.2f** | %s |\n", x.where(), x.trips, map[bool]string{true: "met", false: "**missed**"}[x.trips <= 2])
	}
	if x, ok := r.findDerived("router", 0, 8, dRouterVsDedup); ok {
		check("router: inbox ÷ in-memory Deduplicator", "≥ 0.80", x.s, x.s.med >= 0.8)
	}
	if x, ok := r.findDerived("cleanup", 0, 8, dCleanupRate); ok {
		check("cleanup: rows deleted per second, claims running", "≥ 200,000", x.s, x.s.med >= 200_000)
	}
	if x, ok := r.find("cleanup", "postgres", 0, 8, vDuringCleanup); ok {
		check("claims during cleanup ÷ claims alone", "≥ 0.80", x.ratio, x.ratio.med >= 0.8)
	}
	for _, t := range []struct {
		delay time.Duration
		want  float64
	}{{halfMillisecond, 1.5}, {time.Millisecond, 2}} {
		for _, db := range []struct{ name, variant, what string }{
			{"postgres", vPipe64, "pipelined ÷ write-behind"},
			{"mysql", coalescedName(vPipe64), "coalesced ÷ NewMultiStatement's write-behind"},
		} {
			x, ok := r.find("pipeline", db.name, t.delay, pipelineConns, db.variant)
			if !ok {
				continue
			}
			p99, _ := r.findDerivedOn("pipeline", db.name, t.delay, pipelineConns, latencyName("p99", db.variant))
			p99WB, _ := r.findDerivedOn("pipeline", db.name, t.delay, pipelineConns, latencyName("p99", vWB8))
			what := fmt.Sprintf("%s: %s, %d connections (p99 per message %.2f ms against %.2f ms)",
				x.where(), db.what, pipelineConns, p99.s.med, p99WB.s.med)
			if floor, ok := r.find("pipeline", db.name, t.delay, pipelineConns, vCoalescedFloor); ok {
				what += fmt.Sprintf("; the hand-written floor %.2f× write-behind", floor.ratio.med)
			}
			check(what, fmt.Sprintf("≥ %.2g", t.want), x.ratio, x.ratio.med >= t.want)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "| target | wanted | measured: median [min–max] | |\n| --- | --- | --- | --- |\n" + b.String()
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

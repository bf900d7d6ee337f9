package inboxcli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Progress modes of cleanup.
const (
	progressAuto  = "auto"  // a bar on a terminal, lines elsewhere
	progressBar   = "bar"   // a bar redrawn on one line
	progressLines = "lines" // a line every -progress-every, for logs and cron mail
	progressNone  = "none"  // no count beforehand, no progress, only the summary
)

func (x *cli) cleanupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := x.newCommand("cleanup")
	olderThan := c.fs.String("older-than", "", "delete claims older than this `age`: a duration (336h) or days (14d); required")
	batchSize := c.fs.Int("batch-size", sqlinbox.DefaultCleanupBatchSize, "rows per DELETE, each its own transaction")
	pause := c.fs.Duration("pause", 0, "wait between batches, to leave the database to the claims")
	mode := c.fs.String("progress", progressAuto, "`mode`: auto (a bar on a terminal, lines elsewhere), bar, lines, or none (no count beforehand)")
	every := c.fs.Duration("progress-every", 10*time.Second, "with -progress lines, the `interval` between progress lines; 0: a line per batch")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	if *olderThan == "" {
		return usagef("cleanup: -older-than is required (e.g. -older-than 14d)")
	}
	age, err := parseAge(*olderThan)
	if err != nil {
		return err
	}
	if *batchSize <= 0 {
		return usagef("cleanup: -batch-size must be positive")
	}
	if *every < 0 {
		return usagef("cleanup: -progress-every must not be negative")
	}
	switch *mode {
	case progressAuto:
		*mode = progressLines
		if isTerminal(stdout) {
			*mode = progressBar
		}
	case progressBar, progressLines, progressNone:
	default:
		return usagef("cleanup: -progress %q: use auto, bar, lines or none", *mode)
	}

	d, err := c.connect(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()

	p := &progress{w: stdout, mode: *mode, every: *every}
	config := sqlinbox.CleanupConfig{BatchSize: *batchSize, Pause: *pause, Progress: p.update}
	if *mode != progressNone {
		// The count can take a while on a large table: say what is going on meanwhile.
		p.say(fmt.Sprintf("counting the claims older than %s in %q", age, c.table))
		if p.total, err = d.store.CountExpired(ctx, age); err != nil {
			p.end()
			return err
		}
		p.say(fmt.Sprintf("%s to delete, in batches of %d", plural(p.total, "claim", "claims"), *batchSize))
	}
	start := time.Now()
	deleted, err := d.store.Cleanup(ctx, age, config)
	p.end()
	if err != nil {
		if deleted > 0 {
			return fmt.Errorf("deleted %s, then: %w", plural(deleted, "claim", "claims"), err)
		}
		return err
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "deleted %s older than %s from %q in %s, %s (%.0f rows/s)\n",
		plural(deleted, "claim", "claims"), age, c.table, plural(int64(p.last.Batches), "batch", "batches"),
		elapsed.Round(time.Millisecond), float64(deleted)/max(elapsed.Seconds(), 1e-6))
	return nil
}

// plural writes n and the word for that many: "1 batch", "2 batches".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// isTerminal reports whether w is a character device (a terminal), where a progress bar can
// redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// progress reports a cleanup pass. As a bar, it redraws one line: the rows deleted of the
// rows expired at the start, and the rate; claims that expire during the pass can take it
// past 100%, where it stops. As lines, it prints the same and what is left, once every
// interval (every batch if every is 0), so that a log shows a long pass moving.
type progress struct {
	w     io.Writer
	mode  string
	every time.Duration
	total int64 // claims expired when the pass started

	last     sqlinbox.CleanupProgress
	lastLine time.Duration // Elapsed at the last line
	drawn    bool          // a bar or a status is on the current line
}

// say prints a status line: on its own line, or, with the bar, on the bar's line until the
// bar replaces it.
func (p *progress) say(status string) {
	switch p.mode {
	case progressLines:
		fmt.Fprintln(p.w, status)
	case progressBar:
		fmt.Fprintf(p.w, "\r%s...\x1b[K", status)
		p.drawn = true
	}
}

func (p *progress) update(c sqlinbox.CleanupProgress) {
	p.last = c
	rate := float64(c.Deleted) / max(c.Elapsed.Seconds(), 1e-6)
	switch p.mode {
	case progressBar:
		const width = 30
		fraction := 1.0
		if p.total > 0 {
			fraction = min(float64(c.Deleted)/float64(p.total), 1)
		}
		if c.Done {
			fraction = 1
		}
		filled := int(fraction * width)
		// \x1b[K clears what a longer status left on the line.
		fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d rows, %.0f rows/s\x1b[K",
			strings.Repeat("#", filled), strings.Repeat(" ", width-filled), fraction*100, c.Deleted, p.total, rate)
		p.drawn = true
	case progressLines:
		if c.Batches == 0 || c.Done || c.Elapsed-p.lastLine < p.every {
			return // the summary follows the last batch
		}
		p.lastLine = c.Elapsed
		left := max(p.total-c.Deleted, 0)
		line := fmt.Sprintf("deleted %d of %d claims in %s, %.0f rows/s, %d left",
			c.Deleted, p.total, plural(int64(c.Batches), "batch", "batches"), rate, left)
		if left > 0 && rate > 0 {
			line += fmt.Sprintf(", about %s to go", time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprintln(p.w, line)
	}
}

// end ends the bar's line, so that what follows starts on a line of its own.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

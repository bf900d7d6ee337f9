package inboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

type consumerStats struct {
	consumer       string
	claims         int64
	oldest, newest string
}

func (x *cli) statsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := x.newCommand("stats")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, err := c.connect(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()
	db, dialect, store, t := d.db, d.dialect, d.store, c.target
	parsed, err := dialect.ParseTable(t.table)
	quoted := parsed.Quoted
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, "SELECT consumer, COUNT(*), MIN(processed_at), MAX(processed_at) FROM "+quoted+
		" GROUP BY consumer ORDER BY consumer")
	if err != nil {
		return fmt.Errorf("count claims: %w", err)
	}
	defer rows.Close()
	var consumers []consumerStats
	var total int64
	var oldest, newest string
	for rows.Next() {
		var c consumerStats
		var min, max any
		if err := rows.Scan(&c.consumer, &c.claims, &min, &max); err != nil {
			return fmt.Errorf("count claims: %w", err)
		}
		c.oldest, c.newest = formatTime(min), formatTime(max)
		consumers = append(consumers, c)
		total += c.claims
		// Every dialect's format sorts as text in time order.
		if oldest == "" || c.oldest < oldest {
			oldest = c.oldest
		}
		if c.newest > newest {
			newest = c.newest
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count claims: %w", err)
	}
	size, sizeNote, err := store.TableSize(ctx)
	if err != nil {
		return err
	}
	sizeNote = ", " + sizeNote
	guard := "yes"
	if err := store.CheckTable(ctx); errors.Is(err, sqlinbox.ErrTableMismatch) {
		guard = "NO: " + printable(strings.TrimPrefix(err.Error(), "sqlinbox: "))
	} else if err != nil {
		return err
	}

	unpublished, err := unpublishedLine(ctx, store)
	if err != nil {
		return err
	}

	sharedTotal, shared, err := readSharedKeys(ctx, db, quoted, len(consumers))
	if err != nil {
		return err
	}
	claims := map[string]int64{}
	for _, c := range consumers {
		claims[c.consumer] = c.claims
	}

	index := "yes"
	if indexed, err := d.retentionIndex(ctx); err != nil {
		return err
	} else if !indexed {
		index = "NO: " + noRetentionIndex(t.table, dialect.Name())
	}

	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s (%s)\n", t.table, dialect.Name())
	fmt.Fprintf(w, "guards\t%s\n", guard)
	fmt.Fprintf(w, "retention index\t%s\n", index)
	fmt.Fprintf(w, "size\t%s (%d bytes%s)\n", humanBytes(size), size, sizeNote)
	fmt.Fprintf(w, "claims\t%d\n", total)
	fmt.Fprintf(w, "unpublished\t%s\n", unpublished)
	fmt.Fprintf(w, "consumers\t%d\n", len(consumers))
	writeSharedKeys(w, sharedTotal, shared, claims)
	if total > 0 {
		fmt.Fprintf(w, "oldest claim\t%s\n", printable(oldest))
		fmt.Fprintf(w, "newest claim\t%s\n", printable(newest))
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CONSUMER\tCLAIMS\tOLDEST\tNEWEST")
		for _, c := range consumers {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", printable(c.consumer), c.claims, printable(c.oldest), printable(c.newest))
		}
		writeSharedTable(w, shared, claims)
	}
	return w.Flush()
}

// unpublishedLine says what the relay has to publish: the records whose messages have not
// been marked published and the age of the oldest, or why the table keeps no marks.
func unpublishedLine(ctx context.Context, store *sqlinbox.Store) (string, error) {
	backlog, err := store.Backlog(ctx)
	switch {
	case errors.Is(err, sqlinbox.ErrRelayUnavailable):
		return "no marks: " + printable(strings.TrimPrefix(err.Error(), "sqlinbox: ")), nil
	case errors.Is(err, sqlinbox.ErrTableMismatch):
		return "-", nil
	case err != nil:
		return "", err
	case backlog.Records == 0:
		return "0", nil
	}
	return fmt.Sprintf("%d, the oldest committed %s ago", backlog.Records, backlog.OldestAge.Round(time.Millisecond)), nil
}

// formatTime writes processed_at in one form, in UTC with microseconds: time.Time
// (PostgreSQL; MySQL with parseTime=true), SQLite's "2006-01-02T15:04:05.000Z" and MySQL's
// text "2006-01-02 15:04:05.000000", which is UTC (the table's default is UTC_TIMESTAMP).
func formatTime(v any) string {
	const layout = "2006-01-02 15:04:05.000000Z07:00"
	switch v := v.(type) {
	case time.Time:
		return v.UTC().Format(layout)
	case []byte:
		return formatTime(string(v))
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC().Format(layout)
		}
		if t, err := time.Parse("2006-01-02 15:04:05.999999", v); err == nil {
			return t.Format(layout)
		}
		return v
	case nil:
		return "-"
	default:
		return fmt.Sprint(v)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// printable returns a name read from the table as it is, or quoted as a Go string (with
// escapes) when it is not valid UTF-8 or holds a character strconv.IsPrint refuses (a control
// character, a bidirectional override, a space other than U+0020): the middleware refuses
// control characters in consumer names, but a table written by an older release or by hand
// may hold them, and printed raw they would drive the terminal (an escape sequence) or break
// the columns (a tab or a newline).
func printable(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

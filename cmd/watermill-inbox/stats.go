package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

type consumerStats struct {
	consumer       string
	claims         int64
	oldest, newest string
}

func statsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stats")
	var t target
	t.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	db, dialect, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkTable(ctx, db, dialect, t.table); err != nil {
		return err
	}
	quoted, err := inbox.QuoteTableName(dialect.String(), t.table)
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
	size, sizeNote, err := tableSize(ctx, db, dialect, t.table)
	if err != nil {
		return fmt.Errorf("table size: %w", err)
	}

	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s (%s)\n", t.table, dialect)
	fmt.Fprintf(w, "size\t%s (%d bytes%s)\n", humanBytes(size), size, sizeNote)
	fmt.Fprintf(w, "claims\t%d\n", total)
	fmt.Fprintf(w, "consumers\t%d\n", len(consumers))
	if total > 0 {
		fmt.Fprintf(w, "oldest claim\t%s\n", oldest)
		fmt.Fprintf(w, "newest claim\t%s\n", newest)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "CONSUMER\tCLAIMS\tOLDEST\tNEWEST")
		for _, c := range consumers {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", c.consumer, c.claims, c.oldest, c.newest)
		}
	}
	return w.Flush()
}

// formatTime writes processed_at in one form, with microseconds: time.Time (PostgreSQL;
// MySQL with parseTime=true) and SQLite's "2006-01-02T15:04:05.000Z" in UTC; MySQL's text
// "2006-01-02 15:04:05.000000" as it is, in the session's time zone, which it does not name.
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
		return v
	case nil:
		return "-"
	default:
		return fmt.Sprint(v)
	}
}

// tableSize returns the bytes the table and its indexes take, and a note on what was measured.
func tableSize(ctx context.Context, db *sql.DB, dialect sqlinbox.Dialect, table string) (int64, string, error) {
	var size sql.NullInt64
	switch dialect {
	case sqlinbox.Postgres:
		quoted, _ := inbox.QuoteTableName(dialect.String(), table)
		err := db.QueryRowContext(ctx, "SELECT pg_total_relation_size($1::text::regclass)", quoted).Scan(&size)
		return size.Int64, ", pg_total_relation_size", err
	case sqlinbox.MySQL:
		schema, name, qualified := strings.Cut(table, ".")
		var schemaArg any
		if qualified {
			schemaArg = schema
		} else {
			name = table
		}
		err := db.QueryRowContext(ctx, "SELECT data_length + index_length FROM information_schema.tables "+
			"WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?", schemaArg, name).Scan(&size)
		return size.Int64, ", data_length + index_length: InnoDB's estimate", err
	default:
		// dbstat counts the pages of the table and its index; without it, the file's size.
		name := table
		if schema, rest, ok := strings.Cut(table, "."); ok && schema == "main" {
			name = rest
		}
		err := db.QueryRowContext(ctx, "SELECT SUM(pgsize) FROM dbstat WHERE name IN (?, ?)", name, name+"_processed_at").Scan(&size)
		if err == nil && size.Valid {
			return size.Int64, ", dbstat", nil
		}
		err = db.QueryRowContext(ctx, "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()").Scan(&size)
		return size.Int64, ", the whole database file: page_count * page_size", err
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

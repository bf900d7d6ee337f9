package inboxcli

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Consumers that claim the same keys are either fan-out, several handlers that each must
// process every message (every key of the newer or smaller one is the other's too), or one
// handler's copies claimed under several names: competing consumers whose Config.Consumer
// differs by accident (taken from the host name, say), each of which claims some messages
// alone and runs again every copy that reaches another. Two consumers that share keys and
// each also claimed keys the other did not are the second kind's trace; stats shows them.

// sharedKeys is the number of keys two consumers both claimed.
type sharedKeys struct {
	first, second string // first < second
	keys          int64
}

// partial reports whether each of the two consumers also claimed keys the other did not.
func (s sharedKeys) partial(claims map[string]int64) bool {
	return s.keys < claims[s.first] && s.keys < claims[s.second]
}

// readSharedKeys returns the number of keys claimed under more than one consumer, and the
// keys each pair of consumers shares. Each claim of a lower consumer is looked up under each
// higher one by the primary key (consumer, message_id): about (consumers-1)/2 lookups per
// claim, no statement parameter, the same SQL on every database. One consumer shares nothing.
func readSharedKeys(ctx context.Context, db *sql.DB, quoted string, consumers int) (total int64, pairs []sharedKeys, err error) {
	if consumers < 2 {
		return 0, nil, nil
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT message_id FROM "+quoted+
		" GROUP BY message_id HAVING COUNT(*) > 1) shared").Scan(&total); err != nil {
		return 0, nil, fmt.Errorf("count keys of several consumers: %w", err)
	}
	if total == 0 {
		return 0, nil, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT a.consumer, c.consumer, COUNT(*) FROM (SELECT DISTINCT consumer FROM "+quoted+") c, "+
		quoted+" a WHERE a.consumer < c.consumer AND EXISTS (SELECT 1 FROM "+quoted+
		" b WHERE b.consumer = c.consumer AND b.message_id = a.message_id) GROUP BY a.consumer, c.consumer ORDER BY a.consumer, c.consumer")
	if err != nil {
		return 0, nil, fmt.Errorf("count keys shared by two consumers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s sharedKeys
		if err := rows.Scan(&s.first, &s.second, &s.keys); err != nil {
			return 0, nil, fmt.Errorf("count keys shared by two consumers: %w", err)
		}
		pairs = append(pairs, s)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("count keys shared by two consumers: %w", err)
	}
	return total, pairs, nil
}

// writeSharedKeys writes stats' lines about keys of several consumers: how many, and the
// consumers that look like one handler under several names.
func writeSharedKeys(w io.Writer, total int64, pairs []sharedKeys, claims map[string]int64) {
	fmt.Fprintf(w, "keys of several consumers\t%d\n", total)
	var suspects []string
	for _, s := range pairs {
		if !s.partial(claims) {
			continue
		}
		for _, c := range []string{s.first, s.second} {
			if c = printable(c); !slices.Contains(suspects, c) {
				suspects = append(suspects, c)
			}
		}
	}
	if len(suspects) > 0 {
		slices.Sort(suspects)
		fmt.Fprintf(w, "one handler, several consumers?\t%s: each claimed keys alone and shares others; "+
			"if they compete for one queue, each shared key ran once per consumer: give them one Config.Consumer (docs/guarantees.md#consumers)\n",
			strings.Join(suspects, ", "))
	}
}

// writeSharedTable writes the keys each pair of consumers shares.
func writeSharedTable(w io.Writer, pairs []sharedKeys, claims map[string]int64) {
	if len(pairs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "SHARED KEYS\tCONSUMERS\tEACH ALSO ALONE")
	for _, s := range pairs {
		alone := "no: fan-out, or one consumer's keys within the other's"
		if s.partial(claims) {
			alone = "yes: one handler under two consumers?"
		}
		fmt.Fprintf(w, "%d\t%s, %s\t%s\n", s.keys, printable(s.first), printable(s.second), alone)
	}
}

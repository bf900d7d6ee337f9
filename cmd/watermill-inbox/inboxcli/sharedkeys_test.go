package inboxcli

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// stats tells the two reasons keys are claimed under several consumers apart, on each
// database: fan-out (billing and shipping each claim every order; audit, started later, a
// part of them) is shown but not flagged; three consumers that each claimed orders alone and
// share others (one handler's copies under three names) are flagged, by name.
func TestStatsFlagsOneHandlerUnderSeveralConsumers(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, dialect := d.open(t)
			for _, tt := range []struct {
				name   string
				claims map[string][]int // consumer: its orders
				flag   string           // "": no flag
			}{
				{"fan-out", map[string][]int{"billing": span(0, 60), "shipping": span(0, 60), "audit": span(40, 60)}, ""},
				{"one handler, three names", map[string][]int{
					"billing@host-a": append(span(0, 20), span(20, 25)...), "billing@host-b": append(span(20, 40), span(40, 44)...),
					"billing@host-c": append(span(40, 60), span(0, 3)...),
				}, "billing@host-a, billing@host-b, billing@host-c"},
			} {
				table := testenv.Name("cli_shared")
				t.Cleanup(func() {
					_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
				})
				if code, _, stderr := runCLI(t, "migrate", "-dsn", d.dsn, "-table", table); code != exitOK {
					t.Fatalf("migrate: %s", stderr)
				}
				shared := map[int]int{}
				for consumer, orders := range tt.claims {
					for _, order := range orders {
						insertKey(t, db, dialect, table, consumer, fmt.Sprintf("order-%02d", order))
						shared[order]++
					}
				}
				var several int
				for _, n := range shared {
					if n > 1 {
						several++
					}
				}
				code, stdout, stderr := runCLI(t, "stats", "-dsn", d.dsn, "-table", table)
				if code != exitOK {
					t.Fatalf("%s: stats: exit %d, %s", tt.name, code, stderr)
				}
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^keys of several consumers\s+%d$`, several)).MatchString(stdout) {
					t.Errorf("%s: stats does not count %d keys of several consumers:\n%s", tt.name, several, stdout)
				}
				flagged := regexp.MustCompile(`(?m)^one handler, several consumers\?\s+(.*): each claimed keys alone`).FindStringSubmatch(stdout)
				switch {
				case tt.flag == "" && flagged != nil:
					t.Errorf("%s: stats flags %s:\n%s", tt.name, flagged[1], stdout)
				case tt.flag != "" && (flagged == nil || flagged[1] != tt.flag):
					t.Errorf("%s: stats flags %v, want %s:\n%s", tt.name, flagged, tt.flag, stdout)
				}
				if tt.flag != "" && !strings.Contains(stdout, "yes: one handler under two consumers?") {
					t.Errorf("%s: no pair marked in the table:\n%s", tt.name, stdout)
				}
			}
		})
	}
}

// span returns the orders from, ..., to-1.
func span(from, to int) []int {
	var orders []int
	for i := from; i < to; i++ {
		orders = append(orders, i)
	}
	return orders
}

// insertKey adds one claim.
func insertKey(t *testing.T, db *sql.DB, dialect sqlinbox.Dialect, table, consumer, key string) {
	t.Helper()
	query := "INSERT INTO " + table + " (consumer, message_id) VALUES (?, ?)"
	if dialect.Name() == (sqlinbox.Postgres{}).Name() {
		query = "INSERT INTO " + table + " (consumer, message_id) VALUES ($1, $2)"
	}
	if _, err := db.ExecContext(context.Background(), query, consumer, key); err != nil {
		t.Fatal(err)
	}
}

package inboxcli

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// withParams adds params to a go-sql-driver/mysql DSN.
func withParams(dsn, params string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// The command's cleanup on a DSN whose session is in another time zone than the claims':
// the claims made 0 s earlier stay, those made 2 hours earlier go, in both directions and
// with the claims in the server's own zone (the DSN of the report that found it:
// time_zone=%27%2B05%3A00%27).
func TestCleanupInAnotherTimeZone(t *testing.T) {
	base := testenv.MySQLDSN(t)
	for _, zones := range [][2]string{{"", "+05:00"}, {"+05:00", "-05:00"}, {"-05:00", "+05:00"}} {
		t.Run(fmt.Sprintf("claims in %q, cleanup in %s", zones[0], zones[1]), func(t *testing.T) {
			t.Parallel()
			table := testenv.Name("cli_tz")
			admin, err := sql.Open("mysql", base)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = admin.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
				admin.Close()
			})
			if code, _, stderr := runCLI(t, "migrate", "-dsn", "mysql://"+base, "-table", table); code != exitOK {
				t.Fatalf("migrate: %s", stderr)
			}
			now := time.Now()
			for key, age := range map[string]time.Duration{"old": 2 * time.Hour, "fresh": 0} {
				params := "timestamp=" + strconv.FormatFloat(float64(now.Add(-age).UnixMicro())/1e6, 'f', 6, 64)
				if zones[0] != "" {
					params += "&time_zone=" + url.QueryEscape("'"+zones[0]+"'")
				}
				db, err := sql.Open("mysql", withParams(base, params))
				if err != nil {
					t.Fatal(err)
				}
				_, err = db.ExecContext(context.Background(), "INSERT INTO "+table+" (consumer, message_id) VALUES ('billing', ?)", key)
				db.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			cleanup := "mysql://" + withParams(base, "time_zone="+url.QueryEscape("'"+zones[1]+"'"))
			code, stdout, stderr := runCLI(t, "cleanup", "-dsn", cleanup, "-table", table, "-older-than", "1h", "-progress", "none")
			if want := fmt.Sprintf("deleted 1 claim older than 1h0m0s from %q", table); code != exitOK || !strings.HasPrefix(stdout, want) {
				t.Errorf("cleanup: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
			}
			if code, stdout, _ := runCLI(t, "stats", "-dsn", cleanup, "-table", table); code != exitOK || !regexp.MustCompile(`(?m)^claims\s+1$`).MatchString(stdout) {
				t.Errorf("stats after the cleanup: exit %d, want the fresh claim left:\n%s", code, stdout)
			}
		})
	}
}

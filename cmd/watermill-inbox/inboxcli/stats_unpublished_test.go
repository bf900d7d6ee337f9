package inboxcli

import (
	"context"
	"regexp"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// stats shows the relay's backlog: the unpublished records and the age of the oldest, on
// every database.
func TestStatsShowsTheUnpublishedBacklog(t *testing.T) {
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db, _ := d.open(t)
			table := testenv.Name("cli_unpublished")
			t.Cleanup(func() {
				_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
			})
			if code, _, stderr := runCLI(t, "migrate", "-dsn", d.dsn, "-table", table); code != exitOK {
				t.Fatalf("migrate: exit %d, %s", code, stderr)
			}
			for _, row := range []string{
				"('billing', 'old', " + d.age + ", 1=1)",
				"('billing', 'new', " + d.now + ", 1=1)",
				"('billing', 'published', " + d.age + ", 1=0)",
			} {
				if _, err := db.ExecContext(context.Background(), "INSERT INTO "+table+" (consumer, message_id, processed_at, unpublished) VALUES "+row); err != nil {
					t.Fatal(err)
				}
			}
			code, stdout, stderr := runCLI(t, "stats", "-dsn", d.dsn, "-table", table)
			if want := regexp.MustCompile(`(?m)^unpublished\s+2, the oldest committed (1h59m|2h0m)`); code != exitOK || !want.MatchString(stdout) {
				t.Errorf("stats: exit %d, stderr %q, stdout:\n%s\nwant a line %s", code, stderr, stdout, want)
			}
		})
	}
}

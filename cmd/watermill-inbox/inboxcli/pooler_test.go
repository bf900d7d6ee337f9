package inboxcli

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// Every command, run again and again through PgBouncer in transaction mode with the DSN as a
// user writes it (no pgx option): each run succeeds. pgx's default statement cache names
// statements on the server connection, which the next run meets again through the pooler
// ("prepared statement ... already exists"); the command sends them in exec mode instead. A
// user who sets a caching mode is followed, and a failure it causes names the option. The
// keyword/value form of a DSN is followed as a URL is.
func TestEveryCommandThroughAPooler(t *testing.T) {
	bouncer := testenv.PgBouncerURL(t, 2)
	u, err := url.Parse(bouncer)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	keywords := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username(), password, strings.TrimPrefix(u.Path, "/"))
	table := testenv.Name("cli_pooled")
	direct, err := sql.Open("pgx", testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = direct.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
		direct.Close()
	})

	for _, target := range [][]string{{"-dsn", bouncer}, {"-dialect", "postgres", "-dsn", keywords}} {
		for run := 1; run <= 3; run++ {
			for _, command := range [][]string{
				{"migrate"}, {"check"}, {"stats"}, {"cleanup", "-older-than", "1h", "-progress", "none"}, {"schema"},
			} {
				args := append(append(command, "-table", table), target...)
				if code, _, stderr := runCLI(t, args...); code != exitOK {
					t.Errorf("run %d of %q through PgBouncer: exit %d, %s", run, args, code, stderr)
				}
			}
		}
	}

	// The user's own mode: the statement cache, which fails from the second run, with the
	// option named.
	cached := bouncer + "&default_query_exec_mode=cache_statement"
	if !strings.Contains(bouncer, "?") {
		cached = bouncer + "?default_query_exec_mode=cache_statement"
	}
	var failure string
	for run := 1; run <= 4 && failure == ""; run++ {
		if code, _, stderr := runCLI(t, "check", "-dsn", cached, "-table", table); code != exitOK {
			failure = stderr
		}
	}
	if want := "set default_query_exec_mode=exec in the DSN, or leave the option out"; !strings.Contains(failure, want) {
		t.Errorf("check with the statement cache through PgBouncer: %q, want a failure that says %q", failure, want)
	}
}

// withExecMode adds exec mode to a URL or a keyword/value DSN, and leaves a DSN that chooses
// a mode as it is.
func TestWithExecMode(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u@h/db":                                         "postgres://u@h/db?default_query_exec_mode=exec",
		"postgres://u@h/db?sslmode=disable":                         "postgres://u@h/db?default_query_exec_mode=exec&sslmode=disable",
		"postgres://u@h/db?default_query_exec_mode=simple_protocol": "postgres://u@h/db?default_query_exec_mode=simple_protocol",
		"host=h dbname=db":                                          "host=h dbname=db default_query_exec_mode=exec",
		"host=h default_query_exec_mode=cache_statement":            "host=h default_query_exec_mode=cache_statement",
	} {
		if got := withExecMode(dsn); got != want {
			t.Errorf("withExecMode(%q) = %q, want %q", dsn, got, want)
		}
	}
}

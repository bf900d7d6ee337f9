package outsidedialect_test

import (
	"bytes"
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/cmd/watermill-inbox/inboxcli"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// cliDialect is d as a build of the command of one's own knows it: DSNs of the scheme
// named after the dialect, followed by the driver's DSN.
func (d database) cliDialect() inboxcli.Dialect {
	name := d.dialect.Name()
	return inboxcli.Dialect{
		Dialect: d.dialect,
		Names:   []string{name},
		Open: func(dsn string, _ bool) (*sql.DB, error) {
			return sql.Open(d.driver, strings.TrimPrefix(dsn, name+"://"))
		},
	}
}

// The command's schema, migrate, check and stats, through inboxcli.Main, on each dialect of
// one's own registered beside no other: schema writes the dialect's DDL, check refuses the
// missing table, migrate creates it, check passes, stats counts its claims.
func TestCommandLine(t *testing.T) {
	var dialects []inboxcli.Dialect
	for _, d := range databases {
		dialects = append(dialects, d.cliDialect())
	}
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := inboxcli.Main(context.Background(), args, &out, &errOut, dialects...)
		return code, out.String(), errOut.String()
	}
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			driverDSN := d.dsn(t, "")
			dsn := d.dialect.Name() + "://" + driverDSN
			db := open(t, d.driver, driverDSN)
			table := testenv.Name("cli")
			dropLater(t, db, table)

			code, stdout, stderr := cli("schema", "-dialect", d.dialect.Name(), "-table", table)
			want, err := sqlinbox.SchemaSQL(d.dialect, table)
			if code != 0 || err != nil || stdout != want {
				t.Fatalf("schema: exit %d, %q, %q; want the dialect's DDL %q", code, stdout, stderr, want)
			}
			if code, _, stderr = cli("check", "-dsn", dsn, "-table", table); code != 1 || !strings.Contains(stderr, "-dialect "+d.dialect.Name()) {
				t.Fatalf("check of a missing table: exit %d, %q; want 1 and the migration's command for -dialect %s", code, stderr, d.dialect.Name())
			}
			if code, stdout, stderr = cli("migrate", "-dsn", dsn, "-table", table); code != 0 {
				t.Fatalf("migrate: exit %d, %q, %q", code, stdout, stderr)
			}
			if code, stdout, stderr = cli("check", "-dsn", dsn, "-table", table); code != 0 || !strings.Contains(stdout, "can guard") {
				t.Fatalf("check: exit %d, %q, %q", code, stdout, stderr)
			}
			store, err := sqlinbox.NewDB(db, d.dialect, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"a", "b", "c"} {
				tx, _, err := store.Claim(ctx, inbox.Claim{Consumer: "billing", Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			code, stdout, stderr = cli("stats", "-dsn", dsn, "-table", table)
			if code != 0 || !regexp.MustCompile(`(?m)^claims\s+3$`).MatchString(stdout) || !regexp.MustCompile(`(?m)^billing\s+3\s`).MatchString(stdout) {
				t.Fatalf("stats: exit %d, stderr %q:\n%s", code, stderr, stdout)
			}
		})
	}
}

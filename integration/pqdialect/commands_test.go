package pqdialect_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/cmd/watermill-inbox/inboxcli"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/integration/pqdialect"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// cliDialect is the dialect as a build of the command of one's own knows it: DSNs of the
// scheme pq://, opened through lib/pq.
var cliDialect = inboxcli.Dialect{
	Dialect: pqdialect.New(),
	Names:   []string{"pq"},
	Open: func(dsn string, _ bool) (*sql.DB, error) {
		return sql.Open("postgres", "postgres://"+strings.TrimPrefix(dsn, "pq://"))
	},
}

func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = inboxcli.Main(context.Background(), args, &out, &errOut, cliDialect)
	return code, out.String(), errOut.String()
}

// The command's schema, migrate, check and stats on the dialect, with no change to the
// command: a missing table is refused with the migration's command, which writes the
// dialect's DDL; migrate creates the table; check passes; stats counts its claims.
func TestCommandLine(t *testing.T) {
	u := testenv.PostgresURL(t)
	dsn := "pq://" + strings.TrimPrefix(strings.TrimPrefix(u, "postgres://"), "postgresql://")
	d := openDB(t)
	table := testenv.Name("cli")
	d.drop(t, table)

	code, stdout, stderr := cli(t, "schema", "-dialect", "pq", "-table", table)
	want, err := sqlinbox.SchemaSQL(pqdialect.New(), table)
	if code != 0 || err != nil || stdout != want {
		t.Fatalf("schema: exit %d, %q, %q; want the dialect's DDL", code, stdout, stderr)
	}
	code, _, stderr = cli(t, "check", "-dsn", dsn, "-table", table)
	if code != 1 || !regexp.MustCompile(`"watermill-inbox schema [^"]*-dialect pq[^"]*"`).MatchString(stderr) {
		t.Fatalf("check of a missing table: exit %d, %q; want 1 and the migration's command for -dialect pq", code, stderr)
	}
	if code, stdout, stderr = cli(t, "migrate", "-dsn", dsn, "-table", table); code != 0 {
		t.Fatalf("migrate: exit %d, %q, %q", code, stdout, stderr)
	}
	if code, stdout, stderr = cli(t, "check", "-dsn", dsn, "-table", table); code != 0 || !strings.Contains(stdout, "can guard") {
		t.Fatalf("check: exit %d, %q, %q", code, stdout, stderr)
	}
	store, err := sqlinbox.NewDB(d.DB, pqdialect.New(), sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		tx, _, err := store.Claim(context.Background(), inbox.Claim{Consumer: "billing", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr = cli(t, "stats", "-dsn", dsn, "-table", table)
	if code != 0 || !regexp.MustCompile(`(?m)^claims\s+3$`).MatchString(stdout) || !regexp.MustCompile(`(?m)^billing\s+3\s`).MatchString(stdout) {
		t.Fatalf("stats: exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
}

// The handler kit on a store of the dialect, its *sql.DB on the kit's Connector over lib/pq's:
// a correct handler passes every scenario, and one that writes through the pool is caught.
func TestHandlerKit(t *testing.T) {
	ctx := context.Background()
	d := openDB(t)
	connector, err := pq.NewConnector(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(handlertest.Connector(connector))
	t.Cleanup(func() { db.Close() })
	table, invoices := testenv.Name("kit"), testenv.Name("kit_invoices")
	d.drop(t, table, invoices)
	store, err := sqlinbox.NewDB(db, pqdialect.New(), sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+invoices+" (order_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + invoices + " (order_id) VALUES ($1)"
	c := handlertest.Case{
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: message.NewMessage("order-1", []byte("order-1")),
		Snapshot: func(ctx context.Context) (any, error) {
			var n int
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+invoices).Scan(&n)
			return n, err
		},
		Reset: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DELETE FROM "+invoices)
			return err
		},
	}
	c.Handler = func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
		if !ok {
			return nil, errors.New("no inbox transaction")
		}
		_, err := tx.ExecContext(msg.Context(), insert, string(msg.Payload))
		return nil, err
	}
	if r := handlertest.Run(ctx, t, c, nil); len(r.Problems) != 0 {
		t.Fatalf("a correct handler: %d problems", len(r.Problems))
	}

	c.Handler = func(msg *message.Message) ([]*message.Message, error) {
		_, err := db.ExecContext(msg.Context(), insert, string(msg.Payload)) // the pool, not the transaction
		return nil, err
	}
	quiet := &keptTB{TB: t}
	if r := handlertest.Run(ctx, quiet, c, nil); len(r.Problems) == 0 {
		t.Fatal("a handler that writes through the pool passed")
	}
}

// keptTB keeps the kit's reports instead of failing the test.
type keptTB struct{ testing.TB }

func (keptTB) Errorf(string, ...any) {}
func (keptTB) Helper()               {}

package pqdialect_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/integration/pqdialect"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The store conformance suite, on a store of the dialect, in both modes.
func TestConformance(t *testing.T) {
	t.Run("claim-first", func(t *testing.T) { inboxtest.Run(t, newHarness, nil) })
	t.Run("write-behind", func(t *testing.T) {
		inboxtest.Run(t, newHarness, &inboxtest.Options{Config: inbox.Config{WriteBehind: true}})
	})
}

// db is PostgreSQL through lib/pq, with connections that dial through a switch, so that an
// outage can refuse new ones; app names them, so that the outage can end the open ones.
type db struct {
	*sql.DB
	direct *sql.DB
	app    string
	down   atomic.Bool
}

type switchDialer struct{ down *atomic.Bool }

func (d switchDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialTimeout(network, address, 0)
}

func (d switchDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	if d.down.Load() {
		return nil, errors.New("outage: connection refused")
	}
	return net.DialTimeout(network, address, timeout)
}

func openDB(t *testing.T) *db {
	t.Helper()
	url := testenv.PostgresURL(t)
	direct, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	d := &db{direct: direct, app: testenv.Name("pq")}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	connector, err := pq.NewConnector(url + sep + "application_name=" + d.app)
	if err != nil {
		t.Fatal(err)
	}
	connector.Dialer(switchDialer{&d.down})
	d.DB = sql.OpenDB(connector)
	d.SetMaxOpenConns(16)
	t.Cleanup(func() { d.Close() })
	return d
}

// drop drops tables when the test ends.
func (d *db) drop(t *testing.T, tables ...string) {
	t.Cleanup(func() {
		for _, table := range tables {
			_, _ = d.direct.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
		}
	})
}

func newHarness(t *testing.T) *inboxtest.Harness {
	ctx := context.Background()
	d := openDB(t)
	table, business, faults := testenv.Name("inbox"), testenv.Name("invoices"), testenv.Name("faults")
	d.drop(t, table, business, faults)
	store, err := sqlinbox.NewDB(d.DB, pqdialect.New(), sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{
		"CREATE TABLE " + business + " (consumer text NOT NULL, msg_key text NOT NULL)",
		"CREATE TABLE " + faults + " (v int, CONSTRAINT " + faults + "_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)",
	} {
		if _, err := d.direct.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	violate := "INSERT INTO " + faults + " (v) VALUES (1), (1)"
	return &inboxtest.Harness{
		Store:    store,
		Table:    table,
		Business: business,
		Direct:   runner{d.direct},
		InTx: func(ctx context.Context) (inboxtest.Runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return runner{tx}, ok
		},
		Placeholders: inboxtest.DollarPlaceholders,
		NewStore: func(table string) (inbox.Store, error) {
			return sqlinbox.NewDB(d.DB, pqdialect.New(), sqlinbox.Config{Table: table})
		},
		CommitFaults: map[string]func(ctx context.Context) error{
			"deferred constraint fails at COMMIT": func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](ctx)
				_, err := tx.ExecContext(ctx, violate)
				return err
			},
		},
		QueuedCommitFaults: map[string]inbox.Statement{"deferred constraint fails at COMMIT": {SQL: violate}},
		Outage: func() func() {
			d.down.Store(true)
			_, err := d.direct.ExecContext(ctx,
				"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1", d.app)
			if err != nil {
				t.Fatal(err)
			}
			return func() { d.down.Store(false) }
		},
		Retriable: store.IsTransient,
	}
}

// runner runs the suite's SQL on a *sql.DB or a *sql.Tx.
type runner struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (r runner) Exec(ctx context.Context, query string, args ...any) error {
	_, err := r.q.ExecContext(ctx, inboxtest.DollarPlaceholders(query), args...)
	return err
}

func (r runner) Count(ctx context.Context, query string, args ...any) (n int, err error) {
	err = r.q.QueryRowContext(ctx, inboxtest.DollarPlaceholders(query), args...).Scan(&n)
	return n, err
}

// The table check refuses, through the dialect's catalog query, a table that cannot guard,
// and names what is wrong: a missing table, and primary keys that do not guard.
func TestTableCheck(t *testing.T) {
	ctx := context.Background()
	d := openDB(t)
	for _, tc := range []struct {
		name, ddl, want string
	}{
		{"missing", "", "does not exist"},
		{"primary key on message_id alone", `CREATE TABLE %s (consumer text COLLATE "C" NOT NULL, message_id text COLLATE "C" PRIMARY KEY,
			processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea)`, "its primary key is (message_id)"},
		{"no primary key", `CREATE TABLE %s (consumer text COLLATE "C" NOT NULL, message_id text COLLATE "C" NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, UNIQUE (consumer, message_id))`, "it has no primary key"},
		{"case-insensitive key", `CREATE TABLE %s (consumer text COLLATE "C" NOT NULL, message_id citext NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`,
			"column message_id is citext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := testenv.Name("refused")
			d.drop(t, table)
			if tc.ddl != "" {
				if strings.Contains(tc.ddl, "citext") {
					if _, err := d.direct.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS citext"); err != nil {
						t.Skipf("no citext: %v", err)
					}
				}
				if _, err := d.direct.ExecContext(ctx, strings.Replace(tc.ddl, "%s", table, 1)); err != nil {
					t.Fatal(err)
				}
			}
			store, err := sqlinbox.NewDB(d.DB, pqdialect.New(), sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			err = store.CheckTable(ctx)
			if !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckTable: %v, want ErrTableMismatch saying %q", err, tc.want)
			}
			_, _, err = store.Claim(ctx, inbox.Claim{Consumer: "billing", Key: "order-1"})
			if !errors.Is(err, sqlinbox.ErrTableMismatch) {
				t.Fatalf("Claim on a refused table: %v, want ErrTableMismatch", err)
			}
		})
	}
}

// Retention deletes, in batches, exactly the claims older than the retention, by the
// dialect's own statements, and one cleanup of the table runs at a time.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	d := openDB(t)
	table := testenv.Name("inbox")
	d.drop(t, table)
	store, err := sqlinbox.NewDB(d.DB, pqdialect.New(), sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	fill := "INSERT INTO " + table + " (consumer, message_id, processed_at) " +
		"SELECT 'billing', $1 || g, now() - $2 * interval '1 second' FROM generate_series(1, $3) g"
	for _, f := range []struct {
		prefix string
		age, n int
	}{{"old-", 7200, 250}, {"new-", 60, 40}} {
		if _, err := d.direct.ExecContext(ctx, fill, f.prefix, f.age, f.n); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := store.CountExpired(ctx, time.Hour); err != nil || n != 250 {
		t.Fatalf("CountExpired = %d, %v; want 250", n, err)
	}

	// A pass in the middle of its batches holds the lock: a second returns ErrCleanupBusy.
	paused, resume := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	var deleted int64
	go func() {
		var err error
		deleted, err = store.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{BatchSize: 100, Progress: func(p sqlinbox.CleanupProgress) {
			if p.Batches == 1 {
				close(paused)
				<-resume
			}
		}})
		first <- err
	}()
	<-paused
	if n, err := store.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{}); !errors.Is(err, sqlinbox.ErrCleanupBusy) || n != 0 {
		t.Errorf("a second cleanup: %d deleted, %v; want 0, ErrCleanupBusy", n, err)
	}
	close(resume)
	if err := <-first; err != nil || deleted != 250 {
		t.Fatalf("cleanup: %d deleted, %v; want 250", deleted, err)
	}
	var left int
	if err := d.direct.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&left); err != nil || left != 40 {
		t.Fatalf("%d claims left, %v; want the 40 within the retention", left, err)
	}
	if size, note, err := store.TableSize(ctx); err != nil || size <= 0 || note != "pg_total_relation_size" {
		t.Errorf("TableSize = %d, %q, %v", size, note, err)
	}
}

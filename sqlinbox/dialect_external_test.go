package sqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/pgtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// aliasDialect is PostgreSQL written out as a dialect of one's own would be, from outside
// the sqlinbox package, with none of its SQL taken from sqlinbox.Postgres(). It embeds a nil
// Dialect, which satisfies the interface's unexported method: a method it did not override
// would panic, so that it passes the conformance suite shows a dialect needs nothing the
// package keeps to itself.
type aliasDialect struct{ sqlinbox.Dialect }

func (aliasDialect) Name() string { return "postgres-alias" }

func (aliasDialect) ParseTable(name string) (sqlinbox.Table, error) {
	if err := sqlinbox.ValidateTableName(name); err != nil {
		return sqlinbox.Table{}, err
	}
	t := sqlinbox.Table{Name: name}
	if schema, table, ok := strings.Cut(name, "."); ok {
		t.Schema, t.Name = schema, table
		t.Quoted = `"` + schema + `".`
	}
	t.Quoted += `"` + t.Name + `"`
	return t, nil
}

func (aliasDialect) CreateTable(t sqlinbox.Table) []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.Quoted + ` (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	PRIMARY KEY (consumer, message_id)
)`,
		`CREATE INDEX IF NOT EXISTS "` + t.Name + `_at" ON ` + t.Quoted + ` (processed_at)`,
	}
}

func (aliasDialect) SchemaLock() string { return `SELECT pg_advisory_xact_lock(4242)` }

// DescribeTable is the catalog query written another way than the package's:
// information_schema for the columns, pg_catalog for the collations and the primary key.
func (aliasDialect) DescribeTable(t sqlinbox.Table) (string, []any) {
	return `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) || COALESCE(' COLLATE ' || quote_ident(co.collname), ''),
	COALESCE(array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) + 1, 0)::int,
	(a.atttypid IN ('text'::regtype, 'varchar'::regtype, 'bytea'::regtype) AND COALESCE(co.collisdeterministic, true))::int,
	(a.atttypid = 'bytea'::regtype)::int,
	(a.atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype))::int,
	(NOT a.attnotnull)::int, (a.atthasdef OR a.attgenerated <> '' OR a.attidentity <> '')::int,
	COALESCE((SELECT conname::text FROM pg_constraint WHERE conrelid = a.attrelid AND contype = 'p'), '')
FROM pg_attribute a
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 'default'::regcollation
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, []any{t.Quoted}
}

func (aliasDialect) ColumnTypes() (key, binary, temporal string) {
	return `text COLLATE "C"`, "bytea", "timestamptz"
}

func (aliasDialect) InsertClaim(t sqlinbox.Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)`
}

func (aliasDialect) InsertClaimOrSkip(t sqlinbox.Table) string {
	return `INSERT INTO ` + t.Quoted + ` (consumer, message_id, payload_hash) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING 1`
}

func (aliasDialect) SelectClaim(t sqlinbox.Table) string {
	return `SELECT payload_hash, produced FROM ` + t.Quoted + ` WHERE consumer = $1 AND message_id = $2`
}

func (aliasDialect) UpdateProduced(t sqlinbox.Table) string {
	return `UPDATE ` + t.Quoted + ` SET produced = $1 WHERE consumer = $2 AND message_id = $3`
}

func (aliasDialect) Param(value any) any { return value }

func (aliasDialect) IsDuplicateKey(err error, t sqlinbox.Table) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == t.Name &&
		pgErr.ConstraintName == t.PrimaryKey
}

func (aliasDialect) IsTransient(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

func (aliasDialect) Begin() string { return "START TRANSACTION" }

func (aliasDialect) LockTimeout(timeout time.Duration) (string, []any) {
	return `SELECT set_config('lock_timeout', $1, true)`, []any{fmt.Sprintf("%dms", max(timeout.Milliseconds(), 1))}
}

func (aliasDialect) DeleteExpired(t sqlinbox.Table) string {
	return `DELETE FROM ` + t.Quoted + ` WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM ` + t.Quoted +
		` WHERE processed_at < now() - $1 * interval '1 second' ORDER BY processed_at LIMIT $2)`
}

func (aliasDialect) CountExpired(t sqlinbox.Table) string {
	return `SELECT count(*) FROM ` + t.Quoted + ` WHERE processed_at < now() - $1 * interval '1 second'`
}

func (aliasDialect) Age(olderThan time.Duration) any { return olderThan.Seconds() }

func (aliasDialect) CleanupLock(t sqlinbox.Table) (take, release string, key any) {
	return `SELECT pg_try_advisory_lock(4243, $1::text::regclass::oid::int)::int`,
		`SELECT pg_advisory_unlock(4243, $1::text::regclass::oid::int)::int`, t.Quoted
}

func (aliasDialect) TableSize(t sqlinbox.Table) []sqlinbox.SizeQuery {
	return []sqlinbox.SizeQuery{{SQL: `SELECT pg_relation_size($1::text::regclass)`, Args: []any{t.Quoted}, Note: "the heap alone"}}
}

func (aliasDialect) MultiStatement() *sqlinbox.MultiStatementSQL { return nil }

func TestDialectDefinedOutsideThePackage(t *testing.T) {
	inboxtest.Run(t, aliasHarness, inboxtest.Options{})
}

// aliasHarness builds a store of aliasDialect on PostgreSQL through pgx's database/sql
// driver. Its connections dial through a switch, so that an outage can refuse new ones
// while it ends the open ones.
func aliasHarness(t *testing.T) *inboxtest.Harness {
	ctx := context.Background()
	config, err := pgx.ParseConfig(pgtest.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	direct := stdlib.OpenDB(*config)
	t.Cleanup(func() { direct.Close() })

	app := pgtest.Name("alias")
	var down atomic.Bool
	config = config.Copy()
	config.RuntimeParams["application_name"] = app
	dial := config.DialFunc
	config.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("outage: connection refused")
		}
		return dial(ctx, network, addr)
	}
	db := stdlib.OpenDB(*config)
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })

	table, business, faults := pgtest.Name("inbox"), pgtest.Name("invoices"), pgtest.Name("faults")
	t.Cleanup(func() {
		for _, name := range []string{table, business, faults} {
			_, _ = direct.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+name)
		}
	})
	store, err := sqlinbox.NewDB(db, aliasDialect{}, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{
		"CREATE TABLE " + business + " (consumer varchar(255) NOT NULL, msg_key varchar(255) NOT NULL)",
		"CREATE TABLE " + faults + " (v int, CONSTRAINT " + faults + "_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)",
	} {
		if _, err := direct.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	violate := "INSERT INTO " + faults + " (v) VALUES (1), (1)"
	return &inboxtest.Harness{
		Store:    store,
		Table:    table,
		Business: business,
		Direct:   sqlRunner{direct},
		InTx: func(ctx context.Context) (inboxtest.Runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return sqlRunner{tx}, ok
		},
		Placeholders: inboxtest.DollarPlaceholders,
		NewStore: func(table string) (inbox.Store, error) {
			return sqlinbox.NewDB(db, aliasDialect{}, sqlinbox.Config{Table: table})
		},
		CommitFaults: map[string]func(ctx context.Context) error{
			"deferred constraint fails at COMMIT": func(ctx context.Context) error {
				tx, _ := inbox.TxFromContext[*sql.Tx](ctx)
				_, err := tx.ExecContext(ctx, violate)
				return err
			},
		},
		DeferredCommitFaults: map[string]inbox.Statement{"deferred constraint fails at COMMIT": {SQL: violate}},
		Outage: func() func() {
			down.Store(true)
			_, err := direct.ExecContext(ctx,
				"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1", app)
			if err != nil {
				t.Fatal(err)
			}
			return func() { down.Store(false) }
		},
	}
}

// sqlRunner runs the suite's SQL on a *sql.DB or a *sql.Tx.
type sqlRunner struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (r sqlRunner) Exec(ctx context.Context, query string, args ...any) error {
	_, err := r.q.ExecContext(ctx, inboxtest.DollarPlaceholders(query), args...)
	return err
}

func (r sqlRunner) Count(ctx context.Context, query string, args ...any) (n int, err error) {
	err = r.q.QueryRowContext(ctx, inboxtest.DollarPlaceholders(query), args...).Scan(&n)
	return n, err
}

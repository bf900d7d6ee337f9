package integration

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// docs/operating.md states the privileges the claims need; these tests log in as a role holding
// exactly those grants (and one grant fewer) and claim a key twice.

func TestPostgresPrivileges(t *testing.T) {
	ctx := context.Background()
	admin := openPgxPool(t, testenv.PostgresURL(t))
	table := testenv.Name("inbox")
	adminStore, err := sqlinbox.NewPgx(admin, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := adminStore.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE "+table) })

	for _, tc := range []struct {
		grants string
		works  bool
	}{
		{"INSERT, SELECT, UPDATE", true},
		{"INSERT, SELECT", false},
	} {
		t.Run(tc.grants, func(t *testing.T) {
			role := testenv.Name("claimer")
			mustPgExec(t, admin, "CREATE ROLE "+role+" LOGIN")
			t.Cleanup(func() {
				_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
				_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
			})
			mustPgExec(t, admin, "GRANT "+tc.grants+" ON "+table+" TO "+role)

			u, _ := url.Parse(testenv.PostgresURL(t))
			u.User = url.User(role)
			pool, err := pgxpool.New(ctx, u.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			checkClaimsWith(t, store, tc.works)
		})
	}
}

func TestMySQLPrivileges(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	admin := openSQL(t, "mysql", dsn)
	table := testenv.Name("inbox")
	adminStore, err := sqlinbox.NewDB(admin, sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := adminStore.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP TABLE " + table) })
	var database string
	if err := admin.QueryRow("SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		grants string
		works  bool
	}{
		{"INSERT, SELECT, UPDATE", true},
		{"INSERT, SELECT", false},
	} {
		t.Run(tc.grants, func(t *testing.T) {
			user := testenv.Name("claimer")
			mustSQLExec(t, admin, "CREATE USER '"+user+"'@'%'")
			t.Cleanup(func() { _, _ = admin.Exec("DROP USER '" + user + "'@'%'") })
			mustSQLExec(t, admin, "GRANT "+tc.grants+" ON `"+database+"`.`"+table+"` TO '"+user+"'@'%'")

			at := strings.Index(dsn, "@")
			db := openSQL(t, "mysql", user+dsn[at:])
			store, err := sqlinbox.NewDB(db, sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			checkClaimsWith(t, store, tc.works)
		})
	}
}

// checkClaimsWith claims one key twice, recording produced messages with the first claim:
// with enough privileges the first claim commits and the second is a duplicate that reads
// the record back; without, an error (a nack), never a claim or a skip.
func checkClaimsWith(t *testing.T, store inbox.Store, enough bool) {
	t.Helper()
	ctx := context.Background()
	claim := inbox.Claim{Consumer: "billing", Key: testenv.Name("order"), Fingerprint: []byte{1}}
	tx, prior, err := store.Claim(ctx, claim)
	if err == nil && prior == nil {
		err = tx.Commit(ctx, []byte(`{"v":3,"messages":[]}`))
	}
	if !enough {
		if err == nil {
			t.Fatal("claim and commit succeeded without the privileges docs/operating.md lists")
		}
		return
	}
	if err != nil || prior != nil {
		t.Fatalf("first claim: prior = %v, err = %v; want a new claim", prior, err)
	}
	tx, prior, err = store.Claim(ctx, claim)
	if err != nil || tx != nil || prior == nil || len(prior.Produced) == 0 {
		t.Fatalf("second claim: tx = %v, prior = %+v, err = %v; want a duplicate with its record", tx, prior, err)
	}
}

func mustPgExec(t *testing.T, pool *pgxpool.Pool, query string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func mustSQLExec(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// InitializeSchema run by a role that may not create the table returns the CREATE's own
// error (permission denied, 42501), not the table check's "does not exist ... create it with
// InitializeSchema" that would send the team round in a circle.
func TestInitializeSchemaReturnsTheCreatesError(t *testing.T) {
	ctx := context.Background()
	admin := openPgxPool(t, testenv.PostgresURL(t))
	role := testenv.Name("nocreate")
	mustPgExec(t, admin, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	mustPgExec(t, admin, "REVOKE CREATE ON SCHEMA public FROM "+role)
	u, _ := url.Parse(testenv.PostgresURL(t))
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := testenv.Name("inbox")
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	err = store.InitializeSchema(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || errors.Is(err, sqlinbox.ErrTableMismatch) {
		t.Fatalf("InitializeSchema without CREATE: %v, want the CREATE's permission denied (42501), not the table check", err)
	}
}

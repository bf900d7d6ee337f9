package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// namedKeyShapes are PostgreSQL inbox tables whose primary key on exactly (consumer,
// message_id) is not named "<table>_pkey": named by hand, as migrations often do, and named
// "<table>_pkey1" by PostgreSQL because the old table, renamed, kept "<table>_pkey".
// key is the name the key gets ({t} is the table).
var namedKeyShapes = []struct {
	name, key string
	ddl       []string
}{
	{"CONSTRAINT pk_<table> PRIMARY KEY", "pk_{t}", []string{
		"CREATE TABLE {t} (" + pgColumns + ", CONSTRAINT pk_{t} PRIMARY KEY (consumer, message_id))",
	}},
	{"<table>_pkey1 after a re-create", "{t}_pkey1", []string{
		"CREATE TABLE {t} (" + pgColumns + ", PRIMARY KEY (consumer, message_id))",
		"ALTER TABLE {t} RENAME TO {t}_old",
		"CREATE TABLE {t} (" + pgColumns + ", PRIMARY KEY (consumer, message_id))",
	}},
}

// A PostgreSQL primary key on exactly (consumer, message_id) guards whatever it is called,
// on both stores and in both modes: every delivery is processed once per consumer and key,
// the copies are acked as duplicates. In write-behind mode the claim is then the statement
// that conflicts (on pgx the plain INSERT in the one batch), and the store recognises the
// key by the name its table check read. Before, the check refused such a table.
func TestPrimaryKeyOfAnyName(t *testing.T) {
	for _, name := range []string{"pgx/postgres", "database-sql/postgres"} {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			for _, shape := range namedKeyShapes {
				for _, writeBehind := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/writeBehind=%v", shape.name, writeBehind), func(t *testing.T) {
						t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(context.Background()), "DELETE FROM "+b.business) })
						table := createNamedKeyTable(t, b, shape.ddl, shape.key)
						store, err := b.newStore(sqlinbox.Config{Table: table})
						if err != nil {
							t.Fatal(err)
						}
						errs, _ := deliverAll(t, b, store, writeBehind)
						for i, err := range errs {
							if err != nil {
								t.Errorf("delivery %d (%s %s): %v", i+1, deliveries[i].consumer, deliveries[i].key, err)
							}
						}
						if got := effects(t, b); got != "billing Order-A 1, billing order-a 1, shipping Order-A 1" {
							t.Errorf("business rows: %s; want 1 each", got)
						}
						wantRows(t, "claims", b.rows(t, table, ""), 3)
						// A store made by sqlinbox.NewDB is no WriteBehindStore: the middleware
						// claims it with Claim, as in the claim-first mode.
						if _, oneStep := store.(inbox.WriteBehindStore); writeBehind && oneStep {
							claimConflicts(t, b, store)
						}
					})
				}
			}
		})
	}
}

// createNamedKeyTable runs ddl for a new table, checks that its primary key is named key
// and drops what it made when the test ends.
func createNamedKeyTable(t *testing.T, b *backend, ddl []string, key string) string {
	t.Helper()
	table := testenv.Name("inbox")
	t.Cleanup(func() {
		ctx := context.WithoutCancel(context.Background())
		_ = b.direct.exec(ctx, "DROP TABLE IF EXISTS "+table)
		_ = b.direct.exec(ctx, "DROP TABLE IF EXISTS "+table+"_old")
	})
	expand := func(s string) string { return strings.ReplaceAll(s, "{t}", table) }
	for _, statement := range ddl {
		mustExec(t, b.direct, expand(statement))
	}
	n, err := b.direct.count(context.Background(),
		"SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass(?) AND contype = 'p' AND conname = ?", table, expand(key))
	if err != nil || n != 1 {
		t.Fatalf("the primary key of %s is not named %s (%d, %v)", table, expand(key), n, err)
	}
	return table
}

// claimConflicts sends one message twice through the store's ClaimAndCommit with a write
// to the business table, which has no unique key: the second time only the claim can
// conflict, and the store must return the committed claim, not an error, and commit nothing.
func claimConflicts(t *testing.T, b *backend, store inbox.Store) {
	t.Helper()
	wb, ok := store.(inbox.WriteBehindStore)
	if !ok {
		t.Fatalf("%T is not a WriteBehindStore", store)
	}
	ctx := context.Background()
	key := watermill.NewUUID()
	claim := inbox.Claim{Consumer: "billing", Key: key}
	write := []inbox.Statement{{SQL: b.placeholders("INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"), Args: []any{"billing", key}}}
	if prior, err := wb.ClaimAndCommit(ctx, claim, write, nil); err != nil || prior != nil {
		t.Fatalf("first ClaimAndCommit: prior %v, err %v; want a new claim", prior, err)
	}
	prior, err := wb.ClaimAndCommit(ctx, claim, write, nil)
	if err != nil || prior == nil {
		t.Fatalf("second ClaimAndCommit, whose claim conflicts: prior %v, err %v; want the committed claim", prior, err)
	}
	wantRows(t, "business rows of the twice-sent message", b.invoices(t, "billing", key), 1)
}

// An inbox table with another unique index, here on message_id alone, next to its primary
// key: a second consumer's claim of a key the first consumer claimed violates that index,
// not the key. That is an error (nacked, nothing committed), never a duplicate, which would
// ack the message without processing it: lost for the second consumer. SQLite reports a copy
// of the first consumer's message as a violation of that index too, not of the key: those
// copies are nacked, never acked unprocessed.
func TestOtherUniqueIndexIsNotTheKey(t *testing.T) {
	ddl := map[string][]string{
		"postgres": {"CREATE TABLE {t} (" + pgColumns + ", CONSTRAINT pk_{t} PRIMARY KEY (consumer, message_id))",
			"CREATE UNIQUE INDEX {t}_mid ON {t} (message_id)"},
		"mysql": {"CREATE TABLE {t} (" + mysqlColumns + ", PRIMARY KEY (consumer, message_id), UNIQUE INDEX mid (message_id)) ENGINE=InnoDB"},
		"sqlite": {"CREATE TABLE {t} (" + sqliteColumns + ", PRIMARY KEY (consumer, message_id))",
			"CREATE UNIQUE INDEX {t}_mid ON {t} (message_id)"},
	}
	for _, name := range checkedBackends {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			for _, writeBehind := range []bool{false, true} {
				t.Run(fmt.Sprintf("writeBehind=%v", writeBehind), func(t *testing.T) {
					t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(context.Background()), "DELETE FROM "+b.business) })
					table, _ := createShape(t, b, tableShape{name: "extra unique index", ddl: ddl})
					store, err := b.newStore(sqlinbox.Config{Table: table})
					if err != nil {
						t.Fatal(err)
					}
					errs, _ := deliverAll(t, b, store, writeBehind)
					for i, err := range errs {
						second := deliveries[i].consumer == "shipping"
						switch {
						case second && err == nil:
							t.Errorf("delivery %d (shipping Order-A), whose claim violates the index on message_id, was acked", i+1)
						case second && !strings.Contains(err.Error(), "mid") && !strings.Contains(err.Error(), "message_id"):
							// Taken for a duplicate, it fails only because no committed claim is found.
							t.Errorf("delivery %d (shipping Order-A): %v; want the violation of the index on message_id", i+1, err)
						case !second && err != nil && b.dialect.Name() == (sqlinbox.SQLite{}).Name():
							t.Logf("delivery %d (%s %s), nacked: %v", i+1, deliveries[i].consumer, deliveries[i].key, err)
						case !second && err != nil:
							t.Errorf("delivery %d (%s %s): %v", i+1, deliveries[i].consumer, deliveries[i].key, err)
						}
					}
					if got := effects(t, b); got != "billing Order-A 1, billing order-a 1, shipping Order-A 0" {
						t.Errorf("business rows: %s; want billing's once each, shipping's none", got)
					}
					wantRows(t, "claims", b.rows(t, table, ""), 2)
				})
			}
		})
	}
}

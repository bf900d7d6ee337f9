package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// tableShape is an inbox table a migration tool could make, as DDL per dialect ({t} is the
// table, {ci} a case-insensitive ICU collation on PostgreSQL); no DDL for a dialect: the
// shape does not exist there. want is the reason a refusal gives; "" accepts the table.
type tableShape struct {
	name string
	ddl  map[string][]string
	want string
}

// The columns of the default schema, per dialect, without a key.
const (
	pgColumns     = `consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea`
	mysqlColumns  = `consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB`
	sqliteColumns = `consumer TEXT NOT NULL, message_id TEXT NOT NULL, processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), payload_hash BLOB, produced BLOB`
)

// perDialect gives each dialect the default columns followed by rest (", PRIMARY KEY ...").
func perDialect(rest string) map[string][]string {
	return map[string][]string{
		"postgres": {"CREATE TABLE {t} (" + pgColumns + rest + ")"},
		"mysql":    {"CREATE TABLE {t} (" + mysqlColumns + rest + ") ENGINE=InnoDB"},
		"sqlite":   {"CREATE TABLE {t} (" + sqliteColumns + rest + ")"},
	}
}

var refusedShapes = []tableShape{
	{"no primary key, an index instead", map[string][]string{
		"postgres": {"CREATE TABLE {t} (" + pgColumns + ")", "CREATE INDEX {t}_k ON {t} (consumer, message_id)"},
		"mysql":    {"CREATE TABLE {t} (" + mysqlColumns + ", INDEX k (consumer, message_id)) ENGINE=InnoDB"},
		"sqlite":   {"CREATE TABLE {t} (" + sqliteColumns + ")", "CREATE INDEX {t}_k ON {t} (consumer, message_id)"},
	}, "it has no primary key"},
	{"primary key with a third column", perDialect(", PRIMARY KEY (consumer, message_id, processed_at)"),
		"its primary key is (consumer, message_id, processed_at); want (consumer, message_id)"},
	{"case-insensitive message_id", map[string][]string{
		"postgres": {`CREATE TABLE {t} (consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE {ci} NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`},
		"mysql":    {"CREATE TABLE {t} (consumer VARBINARY(255) NOT NULL, message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"},
		"sqlite":   {"CREATE TABLE {t} (consumer TEXT NOT NULL, message_id TEXT COLLATE NOCASE NOT NULL, processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), payload_hash BLOB, produced BLOB, PRIMARY KEY (consumer, message_id))"},
	}, "column message_id is"},
	{"message_id citext", map[string][]string{
		"postgres": {`CREATE TABLE {t} (consumer varchar(255) COLLATE "C" NOT NULL, message_id citext NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`},
	}, "column message_id is citext, which does not compare bytes exactly"},
	{"message_id utf8mb4_bin, a PAD SPACE collation", map[string][]string{
		"mysql": {"CREATE TABLE {t} (consumer VARBINARY(255) NOT NULL, message_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"},
	}, "column message_id is varchar(255) COLLATE utf8mb4_bin, which does not compare bytes exactly"},
	{"primary key on message_id alone", perDialect(", PRIMARY KEY (message_id)"),
		"its primary key is (message_id); want (consumer, message_id)"},
	{"UNIQUE instead of the primary key", perDialect(", UNIQUE (consumer, message_id)"), "it has no primary key"},
	{"processed_at in the session's local time, as an earlier release made it", map[string][]string{
		"mysql": {"CREATE TABLE {t} (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id), INDEX processed_at (processed_at)) ENGINE=InnoDB"},
	}, "column processed_at is datetime(6) DEFAULT current_timestamp(6), which does not hold the time of the claim as retention compares it; " +
		"want DATETIME(6) DEFAULT (UTC_TIMESTAMP(6)), the time in UTC whatever the session's time zone; a table made by an earlier release is brought up to date " +
		"by the migration of \"watermill-inbox schema -upgrade -format goose -dialect mysql -table "},
	{"processed_at a timestamp without time zone, the session's local time", map[string][]string{
		"postgres": {`CREATE TABLE {t} (consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE "C" NOT NULL, processed_at timestamp NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, PRIMARY KEY (consumer, message_id))`},
	}, "column processed_at is timestamp without time zone, which does not hold the time of the claim as retention compares it; want timestamptz"},
	{"processed_at a TIMESTAMP, which reads in the session's time zone", map[string][]string{
		"mysql": {"CREATE TABLE {t} (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), payload_hash VARBINARY(64), produced LONGBLOB, PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"},
	}, "column processed_at is timestamp(6) DEFAULT current_timestamp(6), which does not hold the time of the claim as retention compares it"},
	{"produced missing", map[string][]string{
		"postgres": {`CREATE TABLE {t} (consumer varchar(255) COLLATE "C" NOT NULL, message_id varchar(255) COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, PRIMARY KEY (consumer, message_id))`},
		"mysql":    {"CREATE TABLE {t} (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(64), PRIMARY KEY (consumer, message_id)) ENGINE=InnoDB"},
		"sqlite":   {"CREATE TABLE {t} (consumer TEXT NOT NULL, message_id TEXT NOT NULL, processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), payload_hash BLOB, PRIMARY KEY (consumer, message_id))"},
	}, "it has no column produced"},
}

// acceptedShape differs from the default schema only in what does not matter: the key's
// columns in the other order, other lengths, text instead of varchar, a rowid table on
// SQLite, an extra nullable column, an extra column with a default and an extra index.
var acceptedShape = tableShape{"extra column and extra index", map[string][]string{
	"postgres": {
		`CREATE TABLE {t} (message_id text COLLATE "C" NOT NULL, consumer varchar(100) COLLATE "C" NOT NULL, processed_at timestamptz NOT NULL DEFAULT now(), payload_hash bytea, produced bytea, tenant text, attempts int NOT NULL DEFAULT 0, PRIMARY KEY (message_id, consumer))`,
		"CREATE INDEX {t}_tenant ON {t} (tenant)",
	},
	"mysql": {"CREATE TABLE {t} (message_id VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, consumer VARBINARY(100) NOT NULL, processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), payload_hash VARBINARY(32), produced MEDIUMBLOB, tenant VARCHAR(64), attempts INT NOT NULL DEFAULT 0, PRIMARY KEY (message_id, consumer), INDEX tenant (tenant), INDEX processed_at (processed_at)) ENGINE=InnoDB"},
	"sqlite": {
		"CREATE TABLE {t} (message_id VARCHAR(200) NOT NULL, consumer VARCHAR(100) NOT NULL, processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), payload_hash BLOB, produced BLOB, tenant TEXT, attempts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (message_id, consumer))",
		"CREATE INDEX {t}_tenant ON {t} (tenant)",
	},
}, ""}

// The backends whose stores check their table: every store, every driver.
var checkedBackends = []string{"pgx/postgres", "database-sql/postgres", "database-sql/mariadb", "database-sql/sqlite"}

// createShape creates shape's table on b and drops it when the test ends; ok is false if the
// shape does not exist on b's database.
func createShape(t *testing.T, b *backend, shape tableShape) (table string, ok bool) {
	t.Helper()
	ddl, ok := shape.ddl[b.dialect.Name()]
	if !ok {
		return "", false
	}
	table = testenv.Name("inbox")
	ctx := context.Background()
	collation := ""
	if b.dialect.Name() == (sqlinbox.Postgres{}).Name() {
		collation = testenv.Name("ci")
		mustExec(t, b.direct, "CREATE COLLATION "+collation+" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
		// The extension stays: other tests may use it at the same time.
		mustExec(t, b.direct, "CREATE EXTENSION IF NOT EXISTS citext")
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = b.direct.exec(ctx, "DROP TABLE IF EXISTS "+table)
		if collation != "" {
			_ = b.direct.exec(ctx, "DROP COLLATION IF EXISTS "+collation)
		}
	})
	for _, statement := range ddl {
		mustExec(t, b.direct, strings.NewReplacer("{t}", table, "{ci}", collation).Replace(statement))
	}
	return table, true
}

// deliveries are what the tables were tried with: one key three times, a key that
// differs from it only in case, and the first key to a second consumer.
var deliveries = []struct{ consumer, key string }{
	{"billing", "Order-A"}, {"billing", "Order-A"}, {"billing", "Order-A"},
	{"billing", "order-a"},
	{"shipping", "Order-A"},
}

// deliverAll delivers every delivery once through a handler on store that writes one
// business row per message, in claim-first or write-behind mode; it returns the errors and
// how often the handler ran.
func deliverAll(t *testing.T, b *backend, store inbox.Store, writeBehind bool) (errs []error, runs int64) {
	t.Helper()
	var ran atomic.Int64
	handlers := map[string]message.HandlerFunc{}
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	for _, consumer := range []string{"billing", "shipping"} {
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: consumer, WriteBehind: writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		handlers[consumer] = mw(func(msg *message.Message) ([]*message.Message, error) {
			ran.Add(1)
			ctx := msg.Context()
			if writeBehind {
				return nil, inbox.ExecAtCommit(ctx, b.placeholders(insert), consumer, msg.UUID)
			}
			r, ok := b.inTx(ctx)
			if !ok {
				return nil, errors.New("no inbox transaction in the handler's context")
			}
			return nil, r.exec(ctx, insert, consumer, msg.UUID)
		})
	}
	for _, d := range deliveries {
		errs = append(errs, deliver(context.Background(), handlers[d.consumer], d.key))
	}
	return errs, ran.Load()
}

// effects says what the deliveries committed: the business rows of each delivered key,
// compared byte for byte (the business table's msg_key has MySQL's case-insensitive default
// collation).
func effects(t *testing.T, b *backend) string {
	where := "WHERE consumer = ? AND msg_key = ?"
	if b.dialect.Name() == (sqlinbox.MySQL{}).Name() {
		where = "WHERE consumer = ? AND BINARY msg_key = ?"
	}
	return fmt.Sprintf("billing Order-A %d, billing order-a %d, shipping Order-A %d",
		b.rows(t, b.business, where, "billing", "Order-A"), b.rows(t, b.business, where, "billing", "order-a"),
		b.rows(t, b.business, where, "shipping", "Order-A"))
}

// Every store refuses every table a migration tool could make that cannot guard, in both
// modes, before anything is committed: each delivery fails with ErrTableMismatch, the
// handler does not run in claim-first mode, no claim and no business row is committed.
// InitializeSchema on such an existing table returns the same error.
func TestRefusesTablesThatCannotGuard(t *testing.T) {
	for _, name := range checkedBackends {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			for _, mode := range []struct {
				name        string
				writeBehind bool
			}{{"claim-first", false}, {"write-behind", true}} {
				for _, shape := range refusedShapes {
					t.Run(mode.name+"/"+shape.name, func(t *testing.T) {
						table, ok := createShape(t, b, shape)
						if !ok {
							t.Skipf("no such table on %s", b.dialect)
						}
						store, err := b.newStore(sqlinbox.Config{Table: table})
						if err != nil {
							t.Fatal(err)
						}
						errs, runs := deliverAll(t, b, store, mode.writeBehind)
						for i, err := range errs {
							if !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), shape.want) {
								t.Errorf("delivery %d (%s %s): err = %v, want ErrTableMismatch saying %q",
									i+1, deliveries[i].consumer, deliveries[i].key, err, shape.want)
							}
						}
						if !mode.writeBehind && runs != 0 {
							t.Errorf("the handler ran %d times, want 0", runs)
						}
						if got := b.rows(t, b.business, ""); got != 0 {
							t.Errorf("business rows committed: %s; want none", effects(t, b))
						}
						wantRows(t, "claims", b.rows(t, table, ""), 0)
						err = store.(interface{ InitializeSchema(context.Context) error }).InitializeSchema(context.Background())
						if !errors.Is(err, sqlinbox.ErrTableMismatch) || !strings.Contains(err.Error(), shape.want) {
							t.Errorf("InitializeSchema: err = %v, want ErrTableMismatch saying %q", err, shape.want)
						}
						if parsed, _ := b.dialect.ParseTable(table); err != nil && !strings.Contains(err.Error(), "table "+parsed.Quoted+" cannot guard") {
							t.Errorf("InitializeSchema: err = %v, want it to name the table %s", err, parsed.Quoted)
						}
						if err := b.direct.exec(context.Background(), "DELETE FROM "+b.business); err != nil {
							t.Fatal(err)
						}
					})
				}
			}
		})
	}
}

// A table that differs from the default schema only in what does not matter processes every
// delivery exactly once per consumer and key, in both modes; InitializeSchema accepts it and
// creates a table it accepts.
func TestAcceptsTablesThatGuard(t *testing.T) {
	for _, name := range checkedBackends {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			for _, writeBehind := range []bool{false, true} {
				t.Run(fmt.Sprintf("writeBehind=%v", writeBehind), func(t *testing.T) {
					table, _ := createShape(t, b, acceptedShape)
					store, err := b.newStore(sqlinbox.Config{Table: table})
					if err != nil {
						t.Fatal(err)
					}
					errs, _ := deliverAll(t, b, store, writeBehind)
					for i, err := range errs {
						if err != nil {
							t.Errorf("delivery %d: %v", i+1, err)
						}
					}
					if got := effects(t, b); got != "billing Order-A 1, billing order-a 1, shipping Order-A 1" {
						t.Errorf("business rows: %s; want 1 each", got)
					}
					wantRows(t, "claims", b.rows(t, table, ""), 3)
					if err := store.(interface{ InitializeSchema(context.Context) error }).InitializeSchema(context.Background()); err != nil {
						t.Errorf("InitializeSchema on the table: %v", err)
					}
					if err := b.direct.exec(context.Background(), "DELETE FROM "+b.business); err != nil {
						t.Fatal(err)
					}
				})
			}

			t.Run("InitializeSchema creates a table it accepts", func(t *testing.T) {
				table := testenv.Name("inbox")
				t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table) })
				store, err := b.newStore(sqlinbox.Config{Table: table})
				if err != nil {
					t.Fatal(err)
				}
				checked := store.(interface {
					InitializeSchema(context.Context) error
					CheckTable(context.Context) error
				})
				if err := checked.CheckTable(context.Background()); !errors.Is(err, sqlinbox.ErrTableMismatch) ||
					!strings.Contains(err.Error(), "it does not exist") {
					t.Errorf("CheckTable before InitializeSchema: err = %v, want ErrTableMismatch: it does not exist", err)
				}
				if err := checked.InitializeSchema(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := checked.CheckTable(context.Background()); err != nil {
					t.Errorf("CheckTable after InitializeSchema: %v", err)
				}
			})
		})
	}
}

// A running store uses a table fixed after it was refused, once it checks again (on its own
// every 5 s, at once with CheckTable): a refusal is a verdict on the table, not on the store.
func TestRefusedTableHealsWhenFixed(t *testing.T) {
	for _, name := range checkedBackends {
		t.Run(name, func(t *testing.T) {
			b := backends[name](t)
			table, _ := createShape(t, b, refusedShapes[0])
			store, err := b.newStore(sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			errs, _ := deliverAll(t, b, store, false)
			if !errors.Is(errs[0], sqlinbox.ErrTableMismatch) {
				t.Fatalf("before the fix: err = %v, want ErrTableMismatch", errs[0])
			}
			// The fix: the table as the schema makes it.
			mustExec(t, b.direct, "DROP TABLE "+table)
			ddl, err := sqlinbox.SchemaSQL(b.dialect, table)
			if err != nil {
				t.Fatal(err)
			}
			for _, statement := range strings.Split(strings.TrimSpace(ddl), ";\n") {
				mustExec(t, b.direct, strings.TrimSuffix(statement, ";"))
			}
			if err := store.(interface{ CheckTable(context.Context) error }).CheckTable(context.Background()); err != nil {
				t.Fatalf("CheckTable after the fix: %v", err)
			}
			errs, _ = deliverAll(t, b, store, false)
			for i, err := range errs {
				if err != nil {
					t.Errorf("delivery %d after the fix: %v", i+1, err)
				}
			}
			if got := effects(t, b); got != "billing Order-A 1, billing order-a 1, shipping Order-A 1" {
				t.Errorf("business rows after the fix: %s; want 1 each", got)
			}
		})
	}
}

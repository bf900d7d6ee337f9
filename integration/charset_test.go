package integration

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The MySQL character sets in which go-sql-driver/mysql's client-side escaping
// (interpolateParams=true) can be undone, each with a character whose UTF-8 ends in a byte
// that makes one character with the backslash the driver puts before a quote. For SJIS and
// CP932 it is U+0101 (C4 81), which ends in the byte of U+0081 (C2 81) and breaks out the
// same way: U+0081 is a C1 control character, which a key may not hold (ErrInvalidKey).
var unsafeCharsets = map[string]string{"gbk": "\u0801", "sjis": "\u0101", "cp932": "\u0101", "big5": "\u0821"}

// mysqlStoreKinds are the constructors of MySQL stores, by name.
var mysqlStoreKinds = []string{"NewDB", "NewMultiStatement", "NewMultiStatementCoalesced"}

// eachMySQLStore runs test as a parallel subtest for each MySQL store kind in each mode.
func eachMySQLStore(t *testing.T, test func(t *testing.T, kind string, writeBehind bool)) {
	for _, kind := range mysqlStoreKinds {
		for _, writeBehind := range []bool{false, true} {
			t.Run(kind+"/"+modeName(writeBehind), func(t *testing.T) {
				t.Parallel()
				test(t, kind, writeBehind)
			})
		}
	}
}

// mysqlPool opens a store of kind on a pool of one connection to the test server, with
// params added to the DSN, and the pool; both are closed when the test ends. The DSN has
// multiStatements=true for NewDB too, the worst case: there an injected statement would run
// as a statement of its own (with the guard disabled, the hostile values dropped the canary
// table on every store and mode on a SET NAMES gbk connection).
func mysqlPool(t *testing.T, kind, params string, config sqlinbox.Config) (*sqlinbox.Store, *sql.DB) {
	t.Helper()
	dsn := testenv.MySQLDSN(t) + "&multiStatements=true"
	if params != "" {
		dsn += "&" + params
	}
	var store *sqlinbox.Store
	var db *sql.DB
	var err error
	switch kind {
	case "NewDB":
		db = openSQL(t, "mysql", dsn)
		store, err = sqlinbox.NewDB(db, sqlinbox.MySQL{}, config)
	case "NewMultiStatement":
		store, db, err = sqlinbox.NewMultiStatement(mysqlConnector(t, dsn), sqlinbox.MySQL{}, config)
	case "NewMultiStatementCoalesced":
		store, db, err = sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, dsn), sqlinbox.MySQL{}, config, sqlinbox.PipelineConfig{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// One connection: what a SET on the pool changes is what the store's next message gets.
	db.SetMaxOpenConns(1)
	return store, db
}

// mysqlBackendOn is a backend whose store is store, on the test server's database; its
// table and the business table are created through a utf8mb4 connection of their own.
func mysqlBackendOn(t *testing.T, store *sqlinbox.Store) *backend {
	t.Helper()
	direct := openSQL(t, "mysql", testenv.MySQLDSN(t))
	b := sqlBackend(t, func(sqlinbox.Config) (inbox.Store, error) { return store, nil }, direct, sqlinbox.MySQL{})
	b.table = store.Table().Name
	creator, err := sqlinbox.NewDB(direct, sqlinbox.MySQL{}, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	if err := creator.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.direct.exec(context.Background(), "DROP TABLE IF EXISTS "+b.table) })
	createBusinessTable(t, b)
	return b
}

// breaksOut reports whether lead followed by a quote ends its string on db's connection: the
// control that shows the connection is in a character set that undoes the driver's escaping.
func breaksOut(t *testing.T, db *sql.DB, lead string) bool {
	t.Helper()
	value := lead + "', 'x"
	var got string
	err := db.QueryRowContext(context.Background(), "SELECT ?", value).Scan(&got)
	return err != nil || got != value
}

// On a MySQL connection whose character_set_client is GBK, SJIS, CP932 or BIG5, set in the
// DSN or by a SET NAMES on the pool after the store checked its table, both MySQL stores in
// both modes refuse every message with an error that names the character set: every hostile
// value of TestSQLInMessageFieldsIsNeverExecuted, and the values that break out of the
// driver's escaping in that character set, leave the canary table alone, plant no claim and
// write nothing. A DSN's character set is refused at start-up, by CheckTable and
// InitializeSchema.
func TestUnsafeCharsetIsRefused(t *testing.T) {
	for charset, lead := range unsafeCharsets {
		t.Run(charset, func(t *testing.T) {
			t.Parallel()
			for _, via := range []string{"DSN", "SET NAMES"} {
				for _, kind := range mysqlStoreKinds {
					for _, writeBehind := range []bool{false, true} {
						t.Run(fmt.Sprintf("%s/%s/%s", via, kind, modeName(writeBehind)), func(t *testing.T) {
							testUnsafeCharsetIsRefused(t, charset, lead, via, kind, writeBehind)
						})
					}
				}
			}
		})
	}
}

func testUnsafeCharsetIsRefused(t *testing.T, charset, lead, via, kind string, writeBehind bool) {
	ctx := context.Background()
	params := ""
	if via == "DSN" {
		params = "charset=" + charset
	}
	store, db := mysqlPool(t, kind, params, sqlinbox.Config{Table: testenv.Name("inbox")})
	b := mysqlBackendOn(t, store)
	named := "character_set_client is " + charset
	if via == "DSN" {
		for name, err := range map[string]error{"CheckTable": store.CheckTable(ctx), "InitializeSchema": store.InitializeSchema(ctx)} {
			if err == nil || !strings.Contains(err.Error(), named) {
				t.Fatalf("%s on a %s DSN: %v; want an error saying %q", name, charset, err, named)
			}
		}
	} else {
		if err := store.CheckTable(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "SET NAMES "+charset); err != nil {
			t.Fatal(err)
		}
	}
	if !breaksOut(t, db, lead) {
		t.Fatalf("control: %q and a quote do not break out of the driver's escaping on this %s connection", lead, charset)
	}

	canary := newCanary(t, b)
	runs := 0
	for _, c := range hostileConsumers(canary) {
		h := hostileHandler(t, b, c.name, c.key, writeBehind, &runs)
		for _, value := range hostileValues(b, canary) {
			msg := attackMessage(value, value)
			msg.Metadata.Set("order_id", value+" (metadata)")
			for delivery := 1; delivery <= 2; delivery++ {
				copied := message.NewMessage(msg.UUID, msg.Payload)
				copied.Metadata = maps.Clone(msg.Metadata)
				_, err := h(copied)
				if err == nil || !strings.Contains(err.Error(), named) {
					t.Fatalf("consumer %q, value %q, delivery %d: %v; want an error saying %q", c.name, value, delivery, err, named)
				}
				if !store.IsTransient(err) {
					t.Fatalf("consumer %q, value %q: the refusal is not transient, so a poison queue would take the message: %v", c.name, value, err)
				}
			}
		}
	}
	if !writeBehind && runs != 0 {
		t.Errorf("the handler ran %d times on a refused connection, want 0", runs)
	}
	checkCanary(t, b, canary)
	wantRows(t, "inbox rows (claims made or planted)", b.rows(t, b.table, ""), 0)
	wantRows(t, "invoices", b.rows(t, b.business, ""), 0)
}

// Honest traffic on a GBK connection: the store refuses the connection at start-up, naming
// the character set, and each of 500 messages is nacked without a claim or a write, so that
// none is processed with a mis-read fingerprint or record.
func TestHonestMessagesOnAGBKConnectionAreRefusedAtStartUp(t *testing.T) {
	eachMySQLStore(t, func(t *testing.T, kind string, writeBehind bool) {
		ctx := context.Background()
		store, _ := mysqlPool(t, kind, "charset=gbk", sqlinbox.Config{Table: testenv.Name("inbox")})
		b := mysqlBackendOn(t, store)
		if err := store.InitializeSchema(ctx); err == nil || !strings.Contains(err.Error(), "character_set_client is gbk") {
			t.Fatalf("InitializeSchema on a gbk connection: %v; want a refusal naming gbk", err)
		}
		h := b.writeBehindHandler(t, "billing", ownKey)
		if !writeBehind {
			h = b.handler(t, "billing", nil, nil)
		}
		for i := 0; i < 500; i++ {
			msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"中文 `+fmt.Sprint(i)+`"}`))
			if _, err := h(msg); err == nil || !strings.Contains(err.Error(), "character_set_client is gbk") {
				t.Fatalf("message %d: %v; want a refusal naming gbk", i, err)
			}
		}
		wantRows(t, "claims", b.rows(t, b.table, ""), 0)
		wantRows(t, "invoices", b.rows(t, b.business, ""), 0)
	})
}

// NO_BACKSLASH_ESCAPES set on the pool's one connection after the store checked its table:
// every hostile value is still stored and returned byte for byte and none runs, on both
// MySQL stores in both modes. The store's own values are hex digits, which no sql_mode reads
// otherwise, and the driver escapes the handler's by the mode the server reports.
func TestNoBackslashEscapesSetMidPool(t *testing.T) {
	eachMySQLStore(t, func(t *testing.T, kind string, writeBehind bool) {
		ctx := context.Background()
		store, db := mysqlPool(t, kind, "", sqlinbox.Config{Table: testenv.Name("inbox")})
		b := mysqlBackendOn(t, store)
		if err := store.CheckTable(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"); err != nil {
			t.Fatal(err)
		}
		testSQLInMessageFields(t, b, writeBehind)
		var mode string
		if err := db.QueryRowContext(ctx, "SELECT @@session.sql_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") {
			t.Errorf("the pool's connection has sql_mode %q at the end: the test did not run under NO_BACKSLASH_ESCAPES", mode)
		}
	})
}

// A queued SET of sql_mode, NAMES or character_set_* is refused, on both MySQL stores in both
// modes: the driver wrote the parameters of the statements after it into their text by the
// session as it was before. Nothing commits, and the connection keeps its character set.
func TestQueuedSessionChangeIsRefused(t *testing.T) {
	sets := []string{
		"SET NAMES gbk",
		"SET character_set_client = sjis",
		"SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')",
		"/*!40101 SET NAMES big5 */",
	}
	eachMySQLStore(t, func(t *testing.T, kind string, writeBehind bool) {
		ctx := context.Background()
		store, db := mysqlPool(t, kind, "", sqlinbox.Config{Table: testenv.Name("inbox")})
		b := mysqlBackendOn(t, store)
		for _, set := range sets {
			mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				if err := inbox.ExecAtCommit(msg.Context(), set); err != nil {
					return nil, err
				}
				return nil, inbox.ExecAtCommit(msg.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID)
			})
			if _, err := h(message.NewMessage(watermill.NewUUID(), nil)); err == nil || !strings.Contains(err.Error(), "queued statement 1: refused") {
				t.Errorf("queued %q: %v; want a refusal of queued statement 1", set, err)
			}
		}
		wantRows(t, "claims", b.rows(t, b.table, ""), 0)
		wantRows(t, "invoices", b.rows(t, b.business, ""), 0)
		var charset string
		if err := db.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&charset); err != nil || charset != "utf8mb4" {
			t.Errorf("the pool's connection: character_set_client %q, err %v; want utf8mb4", charset, err)
		}
	})
}

// A queued PREPARE of a SET NAMES and its EXECUTE, ahead of an INSERT whose argument breaks
// out of the driver's escaping in GBK (U+0801, then a quote, then SQL that drops a canary
// table): refused on both MySQL stores in both modes, as a SET NAMES is, whatever text the
// PREPARE holds. The canary stands, nothing is written, and the connection keeps utf8mb4.
func TestQueuedPreparedSessionChangeIsRefused(t *testing.T) {
	eachMySQLStore(t, func(t *testing.T, kind string, writeBehind bool) {
		ctx := context.Background()
		store, db := mysqlPool(t, kind, "", sqlinbox.Config{Table: testenv.Name("inbox")})
		b := mysqlBackendOn(t, store)
		canary := testenv.Name("canary")
		mustExec(t, b.direct, "CREATE TABLE "+canary+" (id INT PRIMARY KEY)")
		t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+canary) })
		// After the quote, no quote of its own: the driver would escape it, out of reach of
		// the lead byte. 0x62696c6c696e67 is 'billing', 0x696e6a6563746564 'injected'.
		hostile := "\u0801'), (0x62696c6c696e67, 0x696e6a6563746564); DROP TABLE " + canary + "; -- "
		mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			for _, st := range []string{"PREPARE inbox_s FROM 'SET NAMES gbk'", "EXECUTE inbox_s"} {
				if err := inbox.ExecAtCommit(msg.Context(), st); err != nil {
					return nil, err
				}
			}
			return nil, inbox.ExecAtCommit(msg.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", hostile)
		})
		if _, err := h(message.NewMessage(watermill.NewUUID(), nil)); err == nil || !strings.Contains(err.Error(), "queued statement 1: refused") {
			t.Errorf("%v; want a refusal of queued statement 1, the PREPARE", err)
		}
		var n int
		if err := b.direct.exec(ctx, "SELECT 1 FROM "+canary); err != nil {
			t.Errorf("the canary table: %v", err)
		}
		if n = b.rows(t, b.business, ""); n != 0 {
			t.Errorf("%d invoices, want none", n)
		}
		wantRows(t, "claims", b.rows(t, b.table, ""), 0)
		var charset string
		if err := db.QueryRowContext(ctx, "SELECT @@character_set_client").Scan(&charset); err != nil || charset != "utf8mb4" {
			t.Errorf("the pool's connection: character_set_client %q, err %v; want utf8mb4", charset, err)
		}
	})
}

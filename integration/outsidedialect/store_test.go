package outsidedialect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/integration/outsidedialect"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The zero value of each dialect of one's own is ready to use; one that embeds the Dialect
// interface left nil is refused, by SchemaSQL, MigrationFiles and every constructor, with an
// error that says why, and never panics.
func TestZeroValue(t *testing.T) {
	for _, d := range databases {
		if _, err := sqlinbox.SchemaSQL(d.dialect, "inbox"); err != nil {
			t.Errorf("%s: SchemaSQL of the zero value: %v", d.name, err)
		}
	}
	var empty outsidedialect.Embedded
	db := open(t, "sqlite", "file:"+t.TempDir()+"/x.db")
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"SchemaSQL": func() error { _, err := sqlinbox.SchemaSQL(empty, "inbox"); return err },
		"MigrationFiles": func() error {
			_, err := sqlinbox.MigrationFiles(empty, "inbox", sqlinbox.FormatGoose, "1")
			return err
		},
		"NewDB":             func() error { _, err := sqlinbox.NewDB(db, empty, sqlinbox.Config{}); return err },
		"NewMultiStatement": func() error { _, _, err := sqlinbox.NewMultiStatement(connector, empty, sqlinbox.Config{}); return err },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = errors.New("panic")
					t.Errorf("%s on a dialect embedding a nil Dialect panicked: %v", name, p)
				}
			}()
			return call()
		}()
		if err == nil || (err.Error() != "panic" && !strings.Contains(err.Error(), "has no dialect inside")) {
			t.Errorf("%s on a dialect embedding a nil Dialect: %v; want an error saying it has no dialect inside", name, err)
		}
	}
}

// The table check passes on the table the dialect created and keeps its primary key's name,
// and retention deletes the claims older than the retention, through the dialect's SQL.
func TestTableCheckAndRetention(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t, d.driver, d.dsn(t, ""))
			table := testenv.Name("inbox")
			dropLater(t, db, table)
			store, err := sqlinbox.NewDB(db, d.dialect, sqlinbox.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.CheckTable(ctx); err == nil || !errors.Is(err, sqlinbox.ErrTableMismatch) {
				t.Fatalf("CheckTable before the table exists: %v; want an error wrapping ErrTableMismatch", err)
			}
			if err := store.InitializeSchema(ctx); err != nil {
				t.Fatal(err)
			}
			if err := store.CheckTable(ctx); err != nil {
				t.Fatalf("CheckTable: %v", err)
			}
			if store.Table().PrimaryKey == "" && d.name != "sqlite" {
				t.Errorf("Table().PrimaryKey is empty after a passing check")
			}
			for _, key := range []string{"old-1", "old-2", "new"} {
				tx, _, err := store.Claim(ctx, inbox.Claim{Consumer: "billing", Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			mustExec(t, db, "UPDATE "+table+" SET processed_at = "+d.twoHoursAgo+" WHERE message_id LIKE 'old-%'")
			if n, err := store.CountExpired(ctx, time.Hour); err != nil || n != 2 {
				t.Fatalf("CountExpired: %d, %v; want 2", n, err)
			}
			if n, err := store.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{}); err != nil || n != 2 {
				t.Fatalf("Cleanup: %d, %v; want 2 deleted", n, err)
			}
			var left int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&left); err != nil || left != 1 {
				t.Fatalf("claims left: %d, %v; want 1", left, err)
			}
		})
	}
}

// On the MySQL dialect of one's own, the shipped dialect's security checks hold: a
// charset=gbk connection is refused at the table check and at every claim, naming the
// character set, and a queued SET NAMES is refused, committing nothing.
func TestMySQLSecurity(t *testing.T) {
	d := databases[1]
	ctx := context.Background()
	direct := open(t, d.driver, d.dsn(t, ""))
	table, business := testenv.Name("inbox"), testenv.Name("invoices")
	dropLater(t, direct, table, business)
	mustExec(t, direct, "CREATE TABLE "+business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")
	safe, err := sqlinbox.NewDB(direct, d.dialect, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := safe.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}

	gbk, err := sqlinbox.NewDB(open(t, d.driver, d.dsn(t, "charset=gbk")), d.dialect, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	const named = "character_set_client is gbk"
	if err := gbk.CheckTable(ctx); err == nil || !strings.Contains(err.Error(), named) {
		t.Errorf("CheckTable on a charset=gbk connection: %v; want an error saying %q", err, named)
	}
	if _, _, err := gbk.Claim(ctx, inbox.Claim{Consumer: "billing", Key: "k"}); err == nil || !strings.Contains(err.Error(), named) {
		t.Errorf("Claim on a charset=gbk connection: %v; want an error saying %q", err, named)
	}

	for _, writeBehind := range []bool{false, true} {
		mw, err := inbox.NewMiddleware(safe, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			if err := inbox.ExecAtCommit(msg.Context(), "SET NAMES gbk"); err != nil {
				return nil, err
			}
			return nil, inbox.ExecAtCommit(msg.Context(), "INSERT INTO "+business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID)
		})
		if _, err := h(message.NewMessage(watermill.NewUUID(), nil)); err == nil || !strings.Contains(err.Error(), "queued statement 1: refused") {
			t.Errorf("write-behind %v: a queued SET NAMES gbk: %v; want a refusal of queued statement 1", writeBehind, err)
		}
	}
	for _, count := range []string{table, business} {
		var n int
		if err := direct.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+count).Scan(&n); err != nil || n != 0 {
			t.Errorf("rows in %s: %d, %v; want 0", count, n, err)
		}
	}
}

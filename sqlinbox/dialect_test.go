package sqlinbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestValidateTableName(t *testing.T) {
	valid := []string{"inbox", "Inbox_2", "_inbox", "billing.inbox", strings.Repeat("t", 63)}
	for _, name := range valid {
		if err := sqlinbox.ValidateTableName(name); err != nil {
			t.Errorf("ValidateTableName(%q) = %v, want nil", name, err)
		}
	}
	invalid := []string{
		"", ".", "inbox.", ".inbox", "a.b.c", "1inbox", "in box", "inbox;", `in"box`, "in`box",
		"inbox; DROP TABLE users", "inbox--", "inbóx", strings.Repeat("t", 64), "inbox\x00",
	}
	for _, name := range invalid {
		if err := sqlinbox.ValidateTableName(name); !errors.Is(err, sqlinbox.ErrInvalidTableName) {
			t.Errorf("ValidateTableName(%q) = %v, want ErrInvalidTableName", name, err)
		}
	}
}

func TestSchemaSQL(t *testing.T) {
	tests := []struct {
		dialect    sqlinbox.Dialect
		table      string
		wantPrefix string
		wantParts  []string
	}{
		{sqlinbox.Postgres{}, "billing.inbox", `DO $$ BEGIN`,
			[]string{`CREATE SCHEMA "billing";`, `CREATE TABLE IF NOT EXISTS "billing"."inbox" (`, `message_id   varchar(255) COLLATE "C" NOT NULL`,
				"PRIMARY KEY (consumer, message_id)", `CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "billing"."inbox" (processed_at)`}},
		{sqlinbox.MySQL{}, "inbox", "CREATE TABLE IF NOT EXISTS `inbox` (",
			[]string{"message_id   VARBINARY(255) NOT NULL", "PRIMARY KEY (consumer, message_id)", "INDEX processed_at (processed_at)", "ENGINE=InnoDB"}},
		{sqlinbox.SQLite{}, "inbox", `CREATE TABLE IF NOT EXISTS "inbox" (`,
			[]string{"strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", "PRIMARY KEY (consumer, message_id)", "WITHOUT ROWID",
				`CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "inbox" (processed_at)`}},
	}
	for _, tt := range tests {
		t.Run(tt.dialect.Name(), func(t *testing.T) {
			ddl, err := sqlinbox.SchemaSQL(tt.dialect, tt.table)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ddl, tt.wantPrefix) {
				t.Errorf("DDL starts %q, want %q", ddl[:min(len(ddl), len(tt.wantPrefix))], tt.wantPrefix)
			}
			for _, part := range tt.wantParts {
				if !strings.Contains(ddl, part) {
					t.Errorf("DDL lacks %q:\n%s", part, ddl)
				}
			}
			if !strings.HasSuffix(ddl, ";\n") {
				t.Errorf("DDL does not end with %q: %q", ";\n", ddl[max(len(ddl)-10, 0):])
			}
		})
	}
	if _, err := sqlinbox.SchemaSQL(nil, "inbox"); err == nil {
		t.Error("no dialect: no error")
	}
	if _, err := sqlinbox.SchemaSQL(sqlinbox.Postgres{}, "inbox; DROP TABLE x"); !errors.Is(err, sqlinbox.ErrInvalidTableName) {
		t.Errorf("bad table: err = %v, want ErrInvalidTableName", err)
	}
}

func TestConstructorsRejectBadTablesAndDialects(t *testing.T) {
	for _, table := range []string{"inbox; DROP TABLE users", `x" OR "1"="1`, "a.b.c", "1x"} {
		if _, err := sqlinbox.SchemaSQL(sqlinbox.Postgres{}, table); !errors.Is(err, sqlinbox.ErrInvalidTableName) {
			t.Errorf("SchemaSQL(%q): err = %v, want ErrInvalidTableName", table, err)
		}
	}
	// SQLite has no schemas: another than main would be an attached database, which neither
	// a migration tool nor the store's connections attach.
	for _, table := range []string{"app.billing_inbox", "temp.inbox"} {
		_, err := sqlinbox.NewDB(new(sql.DB), sqlinbox.SQLite{}, sqlinbox.Config{Table: table})
		if !errors.Is(err, sqlinbox.ErrInvalidTableName) || !strings.Contains(err.Error(), "SQLite has no schemas") {
			t.Errorf("NewDB(SQLite, %q): err = %v, want ErrInvalidTableName saying SQLite has no schemas", table, err)
		}
	}
	if _, err := sqlinbox.NewDB(nil, sqlinbox.SQLite{}, sqlinbox.Config{}); err == nil {
		t.Error("NewDB with a nil db accepted")
	}
	if _, err := sqlinbox.NewPgx(nil, sqlinbox.Config{}); err == nil {
		t.Error("NewPgx with a nil db accepted")
	}
	if _, err := sqlinbox.NewDB(new(sql.DB), nil, sqlinbox.Config{}); err == nil {
		t.Error("nil Dialect accepted")
	}
	if _, err := sqlinbox.NewDB(new(sql.DB), noInsert{}, sqlinbox.Config{}); err == nil ||
		!strings.Contains(err.Error(), "InsertClaim") {
		t.Errorf("dialect without InsertClaim: err = %v, want one naming InsertClaim", err)
	}

	// NewMultiStatement needs a connector and a dialect with MultiStatement SQL, and takes
	// no Config.Begin.
	if _, _, err := sqlinbox.NewMultiStatement(nil, sqlinbox.MySQL{}, sqlinbox.Config{}); err == nil {
		t.Error("NewMultiStatement with a nil connector accepted")
	}
	if _, _, err := sqlinbox.NewMultiStatement(neverConnector{}, sqlinbox.SQLite{}, sqlinbox.Config{}); err == nil ||
		!strings.Contains(err.Error(), "MultiStatement") {
		t.Errorf("NewMultiStatement(SQLite): err = %v, want one naming MultiStatement", err)
	}
	begin := sqlinbox.Config{Begin: func(context.Context, *sql.TxOptions) (any, *sql.Tx, error) { return nil, nil, nil }}
	if _, _, err := sqlinbox.NewMultiStatement(neverConnector{}, sqlinbox.MySQL{}, begin); err == nil ||
		!strings.Contains(err.Error(), "Config.Begin") {
		t.Errorf("NewMultiStatement with Config.Begin: err = %v, want one naming Config.Begin", err)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/never-dialled")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := sqlinbox.NewPgx(pool, begin); err == nil || !strings.Contains(err.Error(), "Config.Begin") {
		t.Errorf("NewPgx with Config.Begin: err = %v, want one naming Config.Begin", err)
	}
	store, db, err := sqlinbox.NewMultiStatement(neverConnector{}, sqlinbox.MySQL{}, sqlinbox.Config{})
	if err != nil || store == nil || db == nil {
		t.Fatalf("NewMultiStatement(MySQL): %v", err)
	}
	defer db.Close()
}

// noInsert is SQLite without a claim statement.
type noInsert struct{ sqlinbox.SQLite }

func (noInsert) InsertClaim(sqlinbox.Table) string { return "" }

// neverConnector is a driver.Connector that is never asked for a connection.
type neverConnector struct{}

func (neverConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("neverConnector: not for connecting")
}

func (neverConnector) Driver() driver.Driver { return nil }

func TestParseTable(t *testing.T) {
	for _, tt := range []struct {
		dialect     sqlinbox.Dialect
		table, want string
	}{
		{sqlinbox.Postgres{}, "billing.Inbox", `"billing"."Inbox"`},
		{sqlinbox.MySQL{}, "test.inbox", "`test`.`inbox`"},
		{sqlinbox.SQLite{}, "inbox", `"inbox"`},
	} {
		got, err := tt.dialect.ParseTable(tt.table)
		if err != nil || got.Quoted != tt.want {
			t.Errorf("%s.ParseTable(%q) = %q, %v; want %q", tt.dialect.Name(), tt.table, got.Quoted, err, tt.want)
		}
	}
}

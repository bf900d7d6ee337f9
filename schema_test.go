package inbox_test

import (
	"errors"
	"strings"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
)

func TestValidateTableName(t *testing.T) {
	valid := []string{"inbox", "Inbox_2", "_inbox", "billing.inbox", strings.Repeat("t", 63)}
	for _, name := range valid {
		if err := inbox.ValidateTableName(name); err != nil {
			t.Errorf("ValidateTableName(%q) = %v, want nil", name, err)
		}
	}
	invalid := []string{
		"", ".", "inbox.", ".inbox", "a.b.c", "1inbox", "in box", "inbox;", `in"box`, "in`box",
		"inbox; DROP TABLE users", "inbox--", "inbóx", strings.Repeat("t", 64), "inbox\x00",
	}
	for _, name := range invalid {
		if err := inbox.ValidateTableName(name); !errors.Is(err, inbox.ErrInvalidTableName) {
			t.Errorf("ValidateTableName(%q) = %v, want ErrInvalidTableName", name, err)
		}
	}
}

func TestCreateTableSQL(t *testing.T) {
	tests := []struct {
		dialect, table string
		wantPrefix     string
		wantParts      []string
	}{
		{inbox.DialectPostgres, "billing.inbox", `CREATE TABLE IF NOT EXISTS "billing"."inbox" (`,
			[]string{`message_id   varchar(255) COLLATE "C" NOT NULL`, "PRIMARY KEY (consumer, message_id)",
				`CREATE INDEX IF NOT EXISTS "inbox_processed_at" ON "billing"."inbox" (processed_at)`}},
		{inbox.DialectMySQL, "inbox", "CREATE TABLE IF NOT EXISTS `inbox` (",
			[]string{"message_id   VARBINARY(255) NOT NULL", "PRIMARY KEY (consumer, message_id)", "INDEX processed_at (processed_at)", "ENGINE=InnoDB"}},
		{inbox.DialectSQLite, "main.inbox", `CREATE TABLE IF NOT EXISTS "main"."inbox" (`,
			[]string{"strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", "PRIMARY KEY (consumer, message_id)", "WITHOUT ROWID",
				`CREATE INDEX IF NOT EXISTS "main"."inbox_processed_at" ON "inbox" (processed_at)`}},
	}
	for _, tt := range tests {
		t.Run(tt.dialect, func(t *testing.T) {
			ddl, err := inbox.CreateTableSQL(tt.dialect, tt.table)
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
		})
	}
	if _, err := inbox.CreateTableSQL("oracle", "inbox"); err == nil {
		t.Error("unknown dialect: no error")
	}
	if _, err := inbox.CreateTableSQL(inbox.DialectPostgres, "inbox; DROP TABLE x"); !errors.Is(err, inbox.ErrInvalidTableName) {
		t.Errorf("bad table: err = %v, want ErrInvalidTableName", err)
	}
}

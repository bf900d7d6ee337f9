package sqlinbox_test

import (
	"errors"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func TestClaimSQL(t *testing.T) {
	tests := []struct {
		dialect sqlinbox.Dialect
		table   string
		want    string
	}{
		{sqlinbox.Postgres, "inbox", `INSERT INTO "inbox" (consumer, message_id, payload_hash) VALUES ($1, $2, $3) ON CONFLICT (consumer, message_id) DO NOTHING`},
		{sqlinbox.SQLite, "main.inbox", `INSERT INTO "main"."inbox" (consumer, message_id, payload_hash) VALUES (?, ?, ?) ON CONFLICT (consumer, message_id) DO NOTHING`},
		{sqlinbox.MySQL, "inbox", "INSERT INTO `inbox` (consumer, message_id, payload_hash) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE consumer = consumer"},
	}
	for _, tt := range tests {
		t.Run(tt.dialect.String(), func(t *testing.T) {
			got, err := sqlinbox.ClaimSQL(tt.dialect, tt.table)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ClaimSQL =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestSchemaSQLMatchesTheInboxPackage(t *testing.T) {
	for _, d := range []sqlinbox.Dialect{sqlinbox.Postgres, sqlinbox.MySQL, sqlinbox.SQLite} {
		got, err := sqlinbox.SchemaSQL(d, "inbox")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := inbox.CreateTableSQL(d.String(), "inbox")
		if got != want {
			t.Errorf("%s: SchemaSQL differs from inbox.CreateTableSQL", d)
		}
	}
}

func TestConstructorsRejectBadTablesAndDialects(t *testing.T) {
	for _, table := range []string{"inbox; DROP TABLE users", `x" OR "1"="1`, "a.b.c", "1x"} {
		if _, err := sqlinbox.SchemaSQL(sqlinbox.Postgres, table); !errors.Is(err, inbox.ErrInvalidTableName) {
			t.Errorf("SchemaSQL(%q): err = %v, want ErrInvalidTableName", table, err)
		}
	}
	if _, err := sqlinbox.New(nil, sqlinbox.SQLite, sqlinbox.Config{}); err == nil {
		t.Error("New with a nil db accepted")
	}
	if _, err := sqlinbox.NewPgx(nil, sqlinbox.Config{}); err == nil {
		t.Error("NewPgx with a nil db accepted")
	}
	if _, err := sqlinbox.ClaimSQL(sqlinbox.Dialect{}, "inbox"); err == nil {
		t.Error("zero Dialect accepted")
	}
}

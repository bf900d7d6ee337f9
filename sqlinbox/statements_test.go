package sqlinbox

import (
	"testing"
	"time"
)

// The statements a store sends, as rendered for a table.
func TestStatements(t *testing.T) {
	tests := []struct {
		dialect               Dialect
		table                 string
		insert, cleanup       string
		cleanupArgs, lockArgs []any
	}{
		{Postgres{}, "inbox",
			`INSERT INTO "inbox" (consumer, message_id, payload_hash) VALUES ($1, $2, $3)`,
			`DELETE FROM "inbox" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "inbox" WHERE processed_at < now() - $1::bigint * interval '1 microsecond' ORDER BY processed_at LIMIT $2))`,
			[]any{int64(90 * 60 * 1e6), 100}, []any{"1500ms"}},
		{MySQL{}, "test.inbox",
			"INSERT INTO `test`.`inbox` (consumer, message_id, payload_hash) VALUES (UNHEX(IF(@@character_set_client IN ('big5', 'cp932', 'gb18030', 'gbk', 'sjis'), NULL, ?)), UNHEX(?), UNHEX(?))",
			"DELETE FROM `test`.`inbox` WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?",
			[]any{int64(90 * 60 * 1e6), 100}, []any{int64(2)}},
		{SQLite{}, "inbox",
			`INSERT INTO "inbox" (consumer, message_id, payload_hash) VALUES (?, ?, ?)`,
			`DELETE FROM "inbox" WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM "inbox" WHERE processed_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) ORDER BY processed_at LIMIT ?)`,
			[]any{"-5400.000000 seconds", 100}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.dialect.Name(), func(t *testing.T) {
			s, err := newStatements(tt.dialect, Config{Table: tt.table, LockTimeout: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if s.insert != tt.insert {
				t.Errorf("insert =\n%s\nwant\n%s", s.insert, tt.insert)
			}
			if s.deleteExpired != tt.cleanup {
				t.Errorf("cleanup =\n%s\nwant\n%s", s.deleteExpired, tt.cleanup)
			}
			args, err := (&Store{sql: s}).cleanupArgs(90*time.Minute, 100)
			if err != nil || !equalArgs(args, tt.cleanupArgs) {
				t.Errorf("cleanup args = %#v, %v; want %#v", args, err, tt.cleanupArgs)
			}
			if !equalArgs(s.lockTimeoutArgs, tt.lockArgs) {
				t.Errorf("lock timeout args = %#v, want %#v", s.lockTimeoutArgs, tt.lockArgs)
			}
		})
	}
}

func equalArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

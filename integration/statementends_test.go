package integration

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A queued statement that ends in a comment (-- c, # c, an unterminated /* c), holds a
// string with a semicolon, or is two statements, on every store in both modes, pgx's simple
// protocol among them (which joins a batch's statements into one text): the message commits
// with all its rows, or it is nacked, and a message acked without its rows is a failure. Every
// row count is read from another session, and a redelivery afterwards is acked at once: no
// transaction was left open holding the claim's lock.
func TestQueuedStatementNeverSwallowsTheCommit(t *testing.T) {
	backendNames := []string{"database-sql/mariadb", "database-sql/mariadb/multi-statements", "database-sql/postgres",
		"database-sql/sqlite", "pgx/postgres", "pgx/postgres/simple-protocol", "database-sql/mariadb/coalesced"}
	for _, writeBehind := range []bool{false, true} {
		for _, name := range backendNames {
			t.Run(modeName(writeBehind)+"/"+name, func(t *testing.T) {
				t.Parallel()
				var b *backend
				switch name {
				case "pgx/postgres/simple-protocol":
					b = pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
				case "database-sql/mariadb/coalesced":
					b = mysqlBackendOf(t, "", coalescedStores(sqlinbox.PipelineConfig{}))
				default:
					b = backends[name](t)
				}
				testQueuedStatementEnds(t, b, writeBehind)
			})
		}
	}
}

func testQueuedStatementEnds(t *testing.T, b *backend, writeBehind bool) {
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	cases := []struct {
		name, sql string
		args      func(key string) []any
		rows      int // the rows the statement writes when it commits
	}{
		{"line comment --", insert + " -- c", ownRow, 1},
		{"line comment #", insert + " # c", ownRow, 1},
		{"unterminated block comment", insert + " /* c", ownRow, 1},
		{"string with a semicolon", "INSERT INTO " + b.business + " (consumer, msg_key) VALUES ('semi;colon', ?)",
			func(key string) []any { return []any{key} }, 1},
		{"two statements", insert + "; " + insert, func(key string) []any { return append(ownRow(key), ownRow(key)...) }, 2},
		{"semicolon, then a comment", insert + "; -- c", ownRow, 1},
	}
	// A store whose lock wait ends soon: a redelivery that waited for a claim's lock held by a
	// transaction left open would fail instead of hanging.
	store, err := b.newStore(sqlinbox.Config{Table: b.table, LockTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		// last: the statement is the handler's only one, and it produces nothing, so that
		// COMMIT follows it at once; else a statement and the record follow it.
		for _, last := range []bool{false, true} {
			name, after := c.name, 1
			if last {
				name, after = name+", last", 0
			}
			key := watermill.NewUUID()
			hostile := b.placeholders(c.sql)
			handler := func(queue bool) message.HandlerFunc {
				mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return mw(func(msg *message.Message) ([]*message.Message, error) {
					if queue {
						if err := inbox.ExecAtCommit(msg.Context(), hostile, c.args(key)...); err != nil || last {
							return nil, err
						}
					}
					if err := inbox.ExecAtCommit(msg.Context(), b.placeholders(insert), "after", key); err != nil {
						return nil, err
					}
					return []*message.Message{message.NewMessage(key+"/out", []byte("out"))}, nil
				})
			}
			committed := func() (claims, rows int) {
				return b.claims(t, "billing", key), b.rows(t, b.business, "WHERE msg_key = ?", key)
			}

			_, err := handler(true)(message.NewMessage(key, nil))
			claims, rows := committed()
			switch {
			case err == nil && (claims != 1 || rows != c.rows+after):
				t.Errorf("%s: acked with %d claims and %d rows committed; want 1 and %d", name, claims, rows, c.rows+after)
			case err != nil && !(claims == 0 && rows == 0 || claims == 1 && rows == c.rows+after):
				t.Errorf("%s: nacked (%v) with %d claims and %d rows committed; want all or nothing", name, err, claims, rows)
			}
			t.Logf("%s: delivery error %v; %d claims, %d rows", name, err, claims, rows)

			// The redelivery is acked without waiting for a lock.
			if _, err := handler(false)(message.NewMessage(key, nil)); err != nil {
				t.Errorf("%s: redelivery: %v", name, err)
			}
			if claims, _ := committed(); claims != 1 {
				t.Errorf("%s: after the redelivery %d claims, want 1", name, claims)
			}
		}
	}
}

func ownRow(key string) []any { return []any{"billing", key} }

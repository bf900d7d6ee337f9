package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// writeBehindHandler queues the business row: in write-behind mode the handler has no
// transaction, on any store.
func (b *backend) writeBehindHandler(t *testing.T, consumer string, key func(msg *message.Message) string) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer, WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := b.placeholders("INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)")
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		if _, ok := b.inTx(msg.Context()); ok {
			return nil, errors.New("write-behind handler got a transaction")
		}
		return nil, inbox.ExecAtCommit(msg.Context(), insert, consumer, key(msg))
	})
}

func ownKey(msg *message.Message) string { return msg.UUID }

// A unique violation of a queued write is the handler's error, never a duplicate: the
// message is nacked and nothing commits, however the store detects duplicates.
func TestWriteBehindUniqueViolationOfAQueuedWriteIsAnError(t *testing.T) {
	forEachBackend(t, testWriteBehindUniqueViolation)
}

func testWriteBehindUniqueViolation(t *testing.T, b *backend) {
	mustExec(t, b.direct, "CREATE UNIQUE INDEX "+b.business+"_key ON "+b.business+" (msg_key)")
	mustExec(t, b.direct, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES ('earlier', 'taken')")
	h := b.writeBehindHandler(t, "billing", func(*message.Message) string { return "taken" })
	key := watermill.NewUUID()
	if err := deliver(context.Background(), h, key); err == nil {
		t.Fatal("the queued write's unique violation was acked")
	}
	wantRows(t, "claims", b.rows(t, b.table, ""), 0)
	wantRows(t, "business rows", b.rows(t, b.business, ""), 1)

	// A primary key of the handler's own table: MariaDB names every primary key PRIMARY, so
	// the error alone does not say whether the claim or the queued statement failed.
	parent := b.business + "_pk" // dropped with the business table
	mustExec(t, b.direct, "CREATE TABLE "+parent+" (id VARCHAR(64) PRIMARY KEY)")
	mustExec(t, b.direct, "INSERT INTO "+parent+" (id) VALUES ('taken')")
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := b.placeholders("INSERT INTO " + parent + " (id) VALUES (?)")
	h = mw(func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.ExecAtCommit(msg.Context(), insert, "taken")
	})
	if err := deliver(context.Background(), h, key); err == nil {
		t.Fatal("the queued write's primary-key violation was acked")
	}
	wantRows(t, "claims", b.rows(t, b.table, ""), 0)
}

// A copy whose claim arrives while another transaction holds the key waits for it: that
// transaction's commit makes the copy a duplicate whose writes are discarded, its rollback
// lets the copy's claim and writes commit.
func TestWriteBehindCopyWaitsForTheKeysHolder(t *testing.T) {
	for _, name := range []string{"pgx/postgres", "database-sql/postgres"} {
		for _, holderCommits := range []bool{true, false} {
			end := map[bool]string{true: "commit", false: "rollback"}[holderCommits]
			t.Run(name+"/holder "+end+"s", func(t *testing.T) {
				b := backends[name](t)
				ctx := context.Background()
				holder, err := pgx.Connect(ctx, testenv.PostgresURL(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = holder.Close(context.WithoutCancel(ctx)) })
				key := watermill.NewUUID()
				tx, err := holder.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// The holder's claim has the copy's fingerprint (deliver sends no payload): a
				// claim stored without one would not match it.
				fingerprint := sha256.Sum256(nil)
				if _, err := tx.Exec(ctx, `INSERT INTO "`+b.table+`" (consumer, message_id, payload_hash) VALUES ('billing', $1, $2)`,
					key, fingerprint[:]); err != nil {
					t.Fatal(err)
				}

				h := b.writeBehindHandler(t, "billing", ownKey)
				done := make(chan error, 1)
				go func() { done <- deliver(ctx, h, key) }()
				waitForLockWaiter(t, b.direct, b.table, done)
				if holderCommits {
					err = tx.Commit(ctx)
				} else {
					err = tx.Rollback(ctx)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatalf("the copy was nacked: %v", err)
				}
				wantRows(t, "claims", b.rows(t, b.table, ""), 1)
				wantRows(t, "the copy's business rows", b.invoices(t, "billing", key), map[bool]int{true: 0, false: 1}[holderCommits])
			})
		}
	}
}

// waitForLockWaiter polls, outside any transaction (whose statistics snapshot would never
// change), until a session waits for a lock on a statement naming table, with a deadline. A
// delivery that ends first did not wait: it fails the test.
func waitForLockWaiter(t *testing.T, direct runner, table string, delivered <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting, err := direct.count(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || ? || '%'`, table)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case err := <-delivered:
			t.Fatalf("the copy did not wait for the key's holder: delivered with error %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the copy's claim never waited for the key's holder")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A multi-statement store on a connector without multiStatements=true: CheckTable refuses it
// at start-up, and every message fails with the same refusal, which names the DSN settings,
// in both modes; nothing commits, and none of it is poisonous (a restart with the right DSN
// processes the messages).
func TestMultiStatementStoreWithoutTheDriverSettingIsAnError(t *testing.T) {
	b := mysqlBackend(t) // its DSN does not set multiStatements
	store, db, err := sqlinbox.NewMultiStatement(mysqlConnector(t, testenv.MySQLDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b.store = store
	err = store.CheckTable(context.Background())
	if !errors.Is(err, sqlinbox.ErrMultiStatementRefused) || !strings.Contains(err.Error(), "multiStatements=true") {
		t.Errorf("CheckTable: %v, want ErrMultiStatementRefused naming multiStatements=true", err)
	}
	for name, h := range map[string]message.HandlerFunc{
		"write-behind": b.writeBehindHandler(t, "billing", ownKey),
		"claim-first":  b.handler(t, "billing", nil, nil),
	} {
		err = deliver(context.Background(), h, watermill.NewUUID())
		if !errors.Is(err, sqlinbox.ErrMultiStatementRefused) || !strings.Contains(err.Error(), "multiStatements=true") {
			t.Errorf("%s: err = %v, want ErrMultiStatementRefused naming multiStatements=true", name, err)
		}
		if inbox.Poisonous(err) {
			t.Errorf("%s: inbox.Poisonous(%v) = true, want false", name, err)
		}
	}
	wantRows(t, "claims", b.rows(t, b.table, ""), 0)
	wantRows(t, "business rows", b.rows(t, b.business, ""), 0)
}

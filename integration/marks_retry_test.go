package integration

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
)

// A mark's UPDATE that fails on the database's state is sent again: on MariaDB with a lock
// wait timeout of 1 s, a transaction of another client holds the record's row until the
// mark's first statement has timed out and a second one waits for it; then it lets go, and
// the mark is written. Without the retry FlushMarks reports the lock wait timeout, and the
// record stays unpublished.
func TestMarksOutlastALockTimeout(t *testing.T) {
	b := mysqlBackendWith(t, "innodb_lock_wait_timeout=1", false)
	events, log := subscribeEvents(t, "events")
	broker := &failingPublisher{Publisher: events}
	consumer := watermill.NewShortUUID()
	deliver := eventInbox(t, b.store, broker, inbox.Config{Consumer: consumer})
	store := sqlStore(t, b)
	ctx := context.Background()

	broker.failuresLeft.Store(1)
	if err := deliver("held"); err == nil {
		t.Fatal("the delivery whose publish failed returned no error")
	}
	wantBacklog(t, b, 1)

	db := openSQL(t, "mysql", b.dsn)
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT 1 FROM "+b.table+" WHERE message_id = ? FOR UPDATE", "held"); err != nil {
		t.Fatal(err)
	}
	store.MarkPublished(inbox.Claim{Consumer: consumer, Key: "held"})
	flushed := make(chan error, 1)
	go func() { flushed <- store.FlushMarks(ctx) }()

	// The mark's statements waiting for the row, told apart by the time they have run: the
	// first attempt, then the retry.
	attempts, last := 0, int64(-1)
	for attempts < 2 {
		select {
		case err := <-flushed:
			t.Fatalf("FlushMarks returned %v while the row was held, after %d attempt(s) seen waiting: the failed mark was not sent again", err, attempts)
		default:
		}
		var ms float64
		err := db.QueryRowContext(ctx, "SELECT TIME_MS FROM information_schema.PROCESSLIST WHERE INFO LIKE ?",
			"UPDATE %"+b.table+"% SET unpublished%").Scan(&ms)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			last = -1
		case err != nil:
			t.Fatal(err)
		default:
			if last < 0 || int64(ms) < last {
				attempts++
			}
			last = int64(ms)
		}
		time.Sleep(10 * time.Millisecond) // polling the process list, not waiting for an event
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatalf("FlushMarks after the row was let go: %v", err)
	}
	wantBacklog(t, b, 0)
	if copies, _ := log.counts(); copies != 0 {
		t.Errorf("%d events published, want 0: the mark was given without a publish", copies)
	}
}

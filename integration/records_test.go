package integration

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A record that the middleware's MaxRecorded lets through but the server's max_allowed_packet
// does not (the record travels hex-encoded, twice its size) fails on MariaDB with an error
// that names the limit and what to set, wrapping inbox.ErrRecordTooLarge, whatever the
// driver saw (error 1153, a connection reset, a refused interpolation): on both MySQL stores,
// in both modes, with the driver's default packet limit and with maxAllowedPacket=0 (the
// server's). Nothing is committed. The record the error advises commits.
func TestARecordOverMaxAllowedPacketIsAClearError(t *testing.T) {
	t.Parallel()
	for _, params := range []string{"", "maxAllowedPacket=0"} {
		for _, kind := range mysqlStoreKinds {
			for _, writeBehind := range []bool{false, true} {
				name := fmt.Sprintf("params=%q/%s/write-behind=%v", params, kind, writeBehind)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					testRecordOverMaxAllowedPacket(t, params, kind, writeBehind)
				})
			}
		}
	}
}

func testRecordOverMaxAllowedPacket(t *testing.T, params, kind string, writeBehind bool) {
	ctx := context.Background()
	dsn := mysqlMultiStatementsDSN(t)
	if params != "" {
		dsn += "&" + params
	}
	direct := openSQL(t, "mysql", testenv.MySQLDSN(t))
	var limit int64
	if err := direct.QueryRow("SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		t.Fatal(err)
	}
	table := testenv.Name("inbox")
	var store *sqlinbox.Store
	var err error
	var db *sql.DB
	switch kind {
	case "NewMultiStatement":
		store, db, err = sqlinbox.NewMultiStatement(mysqlConnector(t, dsn), sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	case "NewMultiStatementCoalesced":
		store, db, err = sqlinbox.NewMultiStatementCoalesced(mysqlConnector(t, dsn), sqlinbox.MySQL{}, sqlinbox.Config{Table: table}, sqlinbox.PipelineConfig{})
	default:
		store, err = sqlinbox.NewDB(openSQL(t, "mysql", dsn), sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	}
	if db != nil {
		t.Cleanup(func() { db.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table) })
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}

	// recordOf returns a handler whose record (base64 in JSON) is about record bytes.
	recordOf := func(record int64) message.HandlerFunc {
		payload := bytes.Repeat([]byte("x"), int(record-200)*3/4)
		return func(msg *message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out-"+msg.UUID, payload)}, nil
		}
	}
	deliver := func(h message.HandlerFunc, key string) error {
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind, MaxRecorded: 4 * limit}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = mw(h)(message.NewMessage(key, nil))
		return err
	}

	key := watermill.NewUUID()
	err = deliver(recordOf(limit/2+(64<<10)), key)
	advised := limit/2 - 64<<10
	if !errors.Is(err, inbox.ErrRecordTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("max_allowed_packet of %d bytes", limit)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("MaxRecorded to at most %d", advised)) {
		t.Fatalf("a record of %d bytes over a max_allowed_packet of %d: err = %v, want ErrRecordTooLarge naming the limit and the MaxRecorded to set",
			limit/2+(64<<10), limit, err)
	}
	// The message's failure, not the database's, though the server reset the connection: a
	// poison queue takes it instead of retrying it for ever.
	if store.IsTransient(err) || !inbox.Poisonous(err) {
		t.Errorf("IsTransient = %v, Poisonous = %v; want the message's failure: %v", store.IsTransient(err), inbox.Poisonous(err), err)
	}
	if n := countRows(t, direct, "SELECT COUNT(*) FROM "+table); n != 0 {
		t.Errorf("%d claims committed, want none", n)
	}
	if err := deliver(recordOf(advised), key); err != nil {
		t.Fatalf("the advised record of %d bytes: %v", advised, err)
	}
	if n := countRows(t, direct, "SELECT COUNT(*) FROM "+table); n != 1 {
		t.Errorf("%d claims committed, want 1", n)
	}
}

package integration

import (
	"context"
	"database/sql"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The pool NewMultiStatement opens is an ordinary pool for everything but the store:
// transactions with options, prepared statements and autocommit statements behave as on the
// driver's own, also on the one connection the store just used, after a claim that failed in
// its request and after a commit request that failed. A connection the store left in a
// transaction would make the next autocommit INSERT invisible to other sessions (and a later
// START TRANSACTION commit what it held), which the counts through the direct pool would show.
func TestMultiStatementPoolLeavesOtherWorkAlone(t *testing.T) {
	b := backends["database-sql/mariadb/multi-statements"](t)
	ctx := context.Background()
	store, db, err := sqlinbox.NewMultiStatement(mysqlConnector(t, mysqlMultiStatementsDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // the store's connection and everyone else's are the same one
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	autocommit := func(key string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, insert, "other", key); err != nil {
			t.Fatal(err)
		}
		wantRows(t, "autocommit row seen by another session", b.invoices(t, "other", key), 1)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(queued string) message.HandlerFunc {
		return mw(func(msg *message.Message) ([]*message.Message, error) {
			tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
			if !ok {
				t.Error("no *sql.Tx in the handler's context")
			} else if _, err := tx.ExecContext(msg.Context(), insert, "billing", msg.UUID); err != nil {
				return nil, err
			}
			if queued != "" {
				return nil, inbox.ExecAtCommit(msg.Context(), queued, "billing", msg.UUID)
			}
			return nil, nil
		})
	}

	// A first delivery (the store's table check passes), then the pool's other work.
	if err := deliver(ctx, handler(""), watermill.NewUUID()); err != nil {
		t.Fatal(err)
	}
	autocommit(watermill.NewUUID())

	// A claim whose request fails after START TRANSACTION ran: the inbox table is gone.
	mustExec(t, b.direct, "DROP TABLE "+b.table)
	if err := deliver(ctx, handler(""), watermill.NewUUID()); err == nil {
		t.Fatal("a claim into a missing table was acked")
	}
	autocommit(watermill.NewUUID())
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}

	key := watermill.NewUUID()
	if err := deliver(ctx, handler(""), key); err != nil {
		t.Fatal(err)
	}

	// A commit request that fails at its queued statement, after the handler's INSERT.
	failed := watermill.NewUUID()
	if err := deliver(ctx, handler("INSERT INTO "+b.business+" (consumer, msg_key) VALUES (NULL, ?)"), failed); err == nil {
		t.Fatal("a failed commit request was acked")
	}
	autocommit(watermill.NewUUID())
	wantRows(t, "invoices of the failed commit", b.invoices(t, "billing", failed), 0)
	wantRows(t, "claims of the failed commit", b.claims(t, "billing", failed), 0)

	// A transaction with options, and a prepared statement, are the driver's own.
	readOnly, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readOnly.ExecContext(ctx, insert, "other", watermill.NewUUID()); err == nil {
		t.Error("an INSERT in a READ ONLY transaction succeeded")
	}
	if err := readOnly.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack := watermill.NewUUID()
	if _, err := tx.ExecContext(ctx, insert, "other", rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantRows(t, "rows of a rolled-back transaction", b.invoices(t, "other", rolledBack), 0)
	stmt, err := db.PrepareContext(ctx, insert)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	prepared := watermill.NewUUID()
	if _, err := stmt.ExecContext(ctx, "other", prepared); err != nil {
		t.Fatal(err)
	}
	wantRows(t, "row of a prepared statement", b.invoices(t, "other", prepared), 1)

	// The key delivered first is a duplicate now, and the pool still works after it.
	if err := deliver(ctx, handler(""), key); err != nil {
		t.Fatal(err)
	}
	wantRows(t, "invoices of the first key, delivered twice", b.invoices(t, "billing", key), 1)
	autocommit(watermill.NewUUID())
}

// mysqlMultiStatementsDSN is the test DSN with multiStatements and interpolateParams on.
func mysqlMultiStatementsDSN(t *testing.T) string {
	return mysqlMultiStatementsDSNOf(t, testenv.MySQLDSN(t))
}

// mysqlMultiStatementsDSNOf is dsn with multiStatements and interpolateParams set.
func mysqlMultiStatementsDSNOf(t *testing.T, dsn string) string {
	config, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	config.MultiStatements, config.InterpolateParams = true, true
	return config.FormatDSN()
}

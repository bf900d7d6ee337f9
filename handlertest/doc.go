// Package handlertest proves a handler of your own behind the inbox middleware: from your
// own go test, it runs your handler with your store on your real database through the
// situations that make duplicates and losses in production, and compares the business state
// your Snapshot reads with the state one delivery leaves.
//
// The inbox makes a handler's database effects happen once only while the handler keeps
// three rules: every write goes through the inbox transaction (inbox.TxFromContext, or
// inbox.ExecAtCommit), every message it sends goes through inbox.NewPublisher or is returned, and
// every call outside the database carries inbox.KeyFromContext's key. Package inboxtest
// checks stores; this package checks handlers against those rules.
//
// A complete test file, for a handler that writes an invoice (set DATABASE_URL to a
// PostgreSQL test database):
//
//	package invoices_test
//
//	import (
//		"context"
//		"errors"
//		"os"
//		"testing"
//
//		"github.com/ThreeDotsLabs/watermill/message"
//		"github.com/jackc/pgx/v5"
//		"github.com/jackc/pgx/v5/pgxpool"
//
//		inbox "github.com/inboxkit/watermill-inbox"
//		"github.com/inboxkit/watermill-inbox/handlertest"
//		"github.com/inboxkit/watermill-inbox/sqlinbox"
//	)
//
//	// invoice is the handler under test: it writes the order's invoice through the inbox
//	// transaction.
//	func invoice(msg *message.Message) ([]*message.Message, error) {
//		ctx := msg.Context()
//		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
//		if !ok {
//			return nil, errors.New("invoice: no inbox transaction")
//		}
//		_, err := tx.Exec(ctx, "INSERT INTO invoices (order_id) VALUES ($1)", string(msg.Payload))
//		return nil, err
//	}
//
//	func TestInvoice(t *testing.T) {
//		url := os.Getenv("DATABASE_URL")
//		if url == "" {
//			t.Skip("set DATABASE_URL to a PostgreSQL test database")
//		}
//		ctx := t.Context()
//		pool, err := pgxpool.New(ctx, url)
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(pool.Close)
//		if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS invoices (order_id text NOT NULL)"); err != nil {
//			t.Fatal(err)
//		}
//		store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: "inbox"})
//		if err != nil {
//			t.Fatal(err)
//		}
//		if err := store.InitializeSchema(ctx); err != nil {
//			t.Fatal(err)
//		}
//		handlertest.Run(ctx, t, handlertest.Case{
//			Handler: invoice,
//			Store:   store,
//			Config:  inbox.Config{Consumer: "billing"},
//			Message: message.NewMessage("order-1", []byte("order-1")),
//			Snapshot: func(ctx context.Context) (any, error) {
//				rows, err := pool.Query(ctx, "SELECT order_id FROM invoices ORDER BY order_id")
//				if err != nil {
//					return nil, err
//				}
//				return pgx.CollectRows(rows, pgx.RowTo[string])
//			},
//			Reset: func(ctx context.Context) error {
//				_, err := pool.Exec(ctx, "DELETE FROM invoices")
//				return err
//			},
//		}, nil)
//	}
//
// [Run] reports each problem with t.Errorf and also returns it in its [Result], in parts
// (scenario, injected failure, attempt, what, details, probable cause) that a test or a CI
// dashboard can tell apart. [Options] add what is optional: the [Recorder] behind
// Config.Publisher, a Probe of the handler's external calls, the deadline and the seed.
//
// # Scenarios
//
// [Run] runs them all; each is also a function of its own.
//
//   - Reference: one delivery, acked; the handler runs its statements through the inbox
//     transaction (a handler that never does is refused), does not end that transaction,
//     does not use it or write with the message's context after it returned, and what it
//     publishes reaches Options.Recorder.
//   - Copies: 3 more copies after the first, each through a fresh middleware (a lost ack, a
//     restart): no second effect, the handler does not run again (claim-first mode), and
//     each copy sends again what the first sent, with the same UUIDs.
//   - Concurrent: 4 copies released at once: one effect, every copy acked within the
//     deadline after the redeliveries of what the store reports transient; a hang names the
//     copies in flight.
//   - Failures: the handler's k-th statement fails (each k the reference ran), then COMMIT,
//     then a panic after the handler returned: a nack, the state of before, nothing
//     published; then a redelivery leaves the reference's state.
//   - External: the keys Options.Probe saw, in every attempt, are inbox.KeyFromContext's.
//
// Every scenario claims under a consumer of its own, derived from Config.Consumer, so the
// message is new to the inbox in each, and begins from [Case.Reset]. Before any delivery the
// kit claims a key of its own and rolls it back, to check that it can follow the store's
// transactions.
//
// # How failures are injected
//
// On a pgx store the handler gets a pgx.Tx of handlertest's own over the store's: it counts
// Exec, Query, QueryRow, SendBatch (one statement per batch), CopyFrom and Begin, and fails
// the injected one without sending it. On a database/sql store handlertest works one level
// down, in the connections of a *sql.DB opened with [OpenDB] or on [Connector]: the store and
// the handler's repositories must run on that *sql.DB, and every data layer over *sql.Tx
// (GORM, sqlx, ent, bun) is seen there too. Statements queued with inbox.ExecAtCommit, and in
// write-behind mode, are failed inside the store: the k-th is replaced by a text every
// database refuses, so the real database rolls back. A failed COMMIT rolls the real
// transaction back and returns an error wrapping [ErrInjected].
//
// # What handlertest cannot see
//
// A goroutine that the handler starts and that writes after the handler returned is seen
// when its write is done by the time handlertest looks, and handlertest looks after every delivery's
// snapshot, after every Reset and when the run ends: a use of the inbox transaction after
// the handler returned is refused and recorded when it happens ([ErrUsedAfterReturn]); on
// database/sql a statement with the message's context on another connection is recorded
// too; on pgx a write through the pool shows only in the state it leaves (rows that a
// second Reset removes are blamed on such a goroutine, not on the Reset). A goroutine slower
// than that is not seen: handlertest cannot wait for goroutines it does not know. On
// database/sql, a use of the *sql.Tx after the middleware ended it is refused by
// database/sql itself (sql.ErrTxDone) and never reaches handlertest. Statements sent through
// pgx.Tx.Conn() or LargeObjects() bypass handlertest's count. A message sent with a broker's
// publisher directly never passes the inbox nor the [Recorder], and handlertest cannot see it;
// what goes through an inbox.Publisher is recorded with the claim, and handlertest reports what
// of it never reached the Recorder. A Probe that saw no call is not a failure: handlertest
// cannot tell a message that needs no external call from a fake the handler does not call,
// and logs it.
package handlertest

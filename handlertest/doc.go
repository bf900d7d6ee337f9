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
//	func TestBillingHandler(t *testing.T) {
//		handlertest.Run(t, handlertest.Case{
//			Handler:  billing.Handle,
//			Store:    store,    // sqlinbox.NewPgx(pool, ...) or sqlinbox.NewDB(db, ...)
//			Config:   inbox.Config{Consumer: "billing", Publisher: publisher},
//			Message:  orderMessage,
//			Snapshot: readInvoices, // func(ctx) (any, error)
//			Reset:    deleteInvoices,
//			Recorder: recorder,     // inbox.NewPublisher(recorder) is Config.Publisher
//			Probe:    payments.Keys,
//		})
//	}
//
// # Scenarios
//
// Run runs them all; each is also a function of its own.
//
//   - Reference: one delivery, acked; the handler runs its statements through the inbox
//     transaction (a handler that never does is refused), does not end that transaction,
//     and does not use it after it returned.
//   - Copies: more copies after the first, each through a fresh middleware (a lost ack, a
//     restart): no second effect, the handler does not run again (claim-first mode), and
//     each copy sends again what the first sent, with the same UUIDs.
//   - Concurrent: copies released at once: one effect, every copy acked within a deadline
//     after retriable redeliveries; a hang names the copies in flight.
//   - Failures: the handler's k-th statement fails (each k the reference ran), then COMMIT,
//     then a panic after the handler returned: a nack, the state of before, nothing
//     published; then a redelivery leaves the reference's state.
//   - External: the keys Case.Probe saw, in every attempt, are inbox.KeyFromContext's.
//
// Every scenario claims under a consumer of its own, derived from Config.Consumer, so the
// message is new to the inbox in each, and begins from Case.Reset.
//
// # How failures are injected
//
// On a pgx store the handler gets a pgx.Tx of the kit's own over the store's: it counts
// Exec, Query, QueryRow, SendBatch (one statement per batch), CopyFrom and Begin, and fails
// the injected one without sending it. On a database/sql store the kit works one level
// down, in the connections of a *sql.DB opened with OpenDB or on Connector: the store and
// the handler's repositories must run on that *sql.DB, and every data layer over *sql.Tx
// (GORM, sqlx, ent, bun) is seen there too. Statements queued with inbox.ExecAtCommit, and in
// write-behind mode, are failed inside the store: the k-th is replaced by a text every
// database refuses, so the real database rolls back. A failed COMMIT rolls the real
// transaction back and returns an error wrapping ErrInjected.
//
// # What the kit cannot see
//
// A goroutine that the handler starts and that writes after the handler returned is caught
// when its write is done by the time the kit looks: a use of the inbox transaction after
// the handler returned is refused and recorded when it happens (ErrUsedAfterReturn), and
// checked after every reference delivery and again when the run ends; a write through the
// pool after a failed delivery shows as state that survived the failure. A goroutine slower
// than that is not seen: the kit cannot wait for goroutines it does not know. On
// database/sql, a use of the *sql.Tx after the middleware ended it is refused by
// database/sql itself (sql.ErrTxDone) and never reaches the kit. Statements sent through
// pgx.Tx.Conn() or LargeObjects() bypass the kit's count.
package handlertest

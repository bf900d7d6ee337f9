// Package inboxbun gives a bun handler the inbox transaction as a bun.Tx.
//
// The inbox middleware (github.com/inboxkit/watermill-inbox) claims each message in a
// database/sql transaction and puts it in the message context. Tx returns that transaction
// as a bun.Tx bound to the application's *bun.DB, the same value db.BeginTx returns, so
// that repositories typed on bun.IDB commit or roll back with the claim:
//
//	func (h *Handler) Handle(msg *message.Message) error {
//		tx, ok := inboxbun.Tx(msg.Context(), h.db)
//		if !ok {
//			return errors.New("billing: no inbox transaction")
//		}
//		_, err := tx.NewInsert().Model(&Invoice{OrderID: msg.UUID}).Exec(msg.Context())
//		return err
//	}
//
// The store must be a sqlinbox.SQLStore on the same database as h.db (the same *sql.DB is
// simplest: bun.NewDB(sqlDB, pgdialect.New())).
//
// # Why a helper
//
// bun has no constructor for a bun.Tx over an existing *sql.Tx. The literal bun.Tx{Tx: tx}
// compiles and panics on its first query (its unexported *bun.DB is nil); a hand-written
// bun.IDB wrapper needs a method per query builder, cannot offer RunInTx (which hands out a
// bun.Tx), and every method it forgets to override silently runs on the pool. Tx fills the
// unexported fields (the DB and the context) with package reflect instead. It checks their
// names and types first: should a bun release change them, Tx returns ok == false (the
// handler fails, the message is nacked, nothing is lost) and this package's tests fail.
//
// # What works, what ends the transaction, what escapes it
//
// Everything a bun.Tx offers runs inside the inbox transaction, query hooks included.
// tx.RunInTx and tx.BeginTx make a SAVEPOINT, which releases with the claim or rolls back
// alone. tx.Commit() and tx.Rollback() end the inbox transaction itself: the store then
// reports inbox.ErrTxEndedByHandler and the message is nacked. Anything run on the *bun.DB
// runs on the pool, commits on its own, and escapes the guarantee.
package inboxbun

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"unsafe"

	"github.com/uptrace/bun"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Tx returns the inbox transaction in ctx as a bun.Tx on db, with ctx as the context of
// its Exec, Query and QueryRow without a context argument. db is the application's *bun.DB;
// it is not changed. The bun.Tx is only valid while the handler runs.
//
// ok is false, and the bun.Tx zero, when db is nil or not made by bun.NewDB, when ctx carries no inbox transaction
// (it does not come from the inbox middleware, or the middleware runs in write-behind mode),
// when the inbox transaction is not a *sql.Tx (a pgx store), and when this bun version's Tx
// does not have the fields Tx fills. Tx never panics.
func Tx(ctx context.Context, db *bun.DB) (_ bun.Tx, ok bool) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok || tx == nil || !opened(db) || errLayout != nil {
		return bun.Tx{}, false
	}
	out := bun.Tx{Tx: tx}
	fields := reflect.ValueOf(&out).Elem()
	setHidden(fields.FieldByName("db"), reflect.ValueOf(db))
	setHidden(fields.FieldByName("ctx"), reflect.ValueOf(&ctx).Elem())
	return out, true
}

// opened reports whether db was made by bun.NewDB: the fields of a zero bun.DB are behind
// a nil pointer, and reading its *sql.DB panics.
func opened(db *bun.DB) (ok bool) {
	if db == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return db.DB != nil
}

// setHidden sets the unexported field f to v, through its address.
func setHidden(f, v reflect.Value) {
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(v)
}

// errLayout is non-nil when bun.Tx lacks the unexported fields db.BeginTx sets, or they
// changed type.
var errLayout = checkLayout()

func checkLayout() error {
	tx := reflect.TypeFor[bun.Tx]()
	for name, want := range map[string]reflect.Type{
		"db":  reflect.TypeFor[*bun.DB](),
		"ctx": reflect.TypeFor[context.Context](),
	} {
		f, ok := tx.FieldByName(name)
		if !ok || f.Type != want || len(f.Index) != 1 {
			return errors.New("inboxbun: bun.Tx changed: field " + name)
		}
	}
	return nil
}

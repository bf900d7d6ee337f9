// Package inboxsqlx gives a sqlx handler the inbox transaction as a *sqlx.Tx.
//
// The inbox middleware (github.com/inboxkit/watermill-inbox) claims each message in a
// database/sql transaction and puts it in the message context. Tx returns that transaction
// as a *sqlx.Tx that binds, maps and scans exactly like one from the application's
// db.BeginTxx, so that repositories written for sqlx commit or roll back with the claim:
//
//	func (h *Handler) Handle(msg *message.Message) error {
//		tx, ok := inboxsqlx.Tx(msg.Context(), h.db)
//		if !ok {
//			return errors.New("billing: no inbox transaction")
//		}
//		_, err := tx.NamedExecContext(msg.Context(),
//			`INSERT INTO invoices (order_id, amount_cents) VALUES (:order_id, :amount_cents)`, invoice)
//		return err
//	}
//
// The store must be a sqlinbox.SQLStore on the same database as h.db (the same *sql.DB is
// simplest: sqlx.NewDb(sqlDB, "pgx")).
//
// # Why a helper
//
// sqlx has no constructor for a *sqlx.Tx over an existing *sql.Tx, and the obvious literal
// &sqlx.Tx{Tx: tx} is wrong twice over: without Mapper, Select and Get panic on a nil
// mapper; with it, the unexported driver name stays empty, so named queries and Rebind use
// ? placeholders, a syntax error on PostgreSQL, and unsafe mode is lost. Tx fills those
// unexported fields from the application's *sqlx.DB with package reflect. It checks their
// names and types first: should a sqlx release change them, Tx returns ok == false (the
// handler fails, the message is nacked, nothing is lost) and this package's tests fail.
//
// # What works, what ends the transaction, what escapes it
//
// Everything a *sqlx.Tx offers runs inside the inbox transaction: Get, Select, NamedExec,
// Preparex and PrepareNamed (statements prepared on the transaction). sqlx has no nested
// transactions; a SAVEPOINT written by hand works. tx.Commit() and tx.Rollback() end the
// inbox transaction itself: the store then reports inbox.ErrTxEndedByHandler and the message
// is nacked. Anything run on the *sqlx.DB runs on the pool, commits on its own, and escapes
// the guarantee.
package inboxsqlx

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"unsafe"

	"github.com/jmoiron/sqlx"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Tx returns the inbox transaction in ctx as a *sqlx.Tx with db's driver name, mapper and
// unsafe mode. db is the application's *sqlx.DB; it is not changed. The *sqlx.Tx is only
// valid while the handler runs.
//
// ok is false, and the *sqlx.Tx nil, when db is nil, when ctx carries no inbox transaction
// (it does not come from the inbox middleware, or the middleware runs in write-behind mode),
// when the inbox transaction is not a *sql.Tx (a pgx store), and when this sqlx version's
// Tx and DB do not have the fields Tx fills. Tx never panics.
func Tx(ctx context.Context, db *sqlx.DB) (_ *sqlx.Tx, ok bool) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok || tx == nil || db == nil || errLayout != nil {
		return nil, false
	}
	out := &sqlx.Tx{Tx: tx, Mapper: db.Mapper}
	fields := reflect.ValueOf(out).Elem()
	setHidden(fields.FieldByName("driverName")).SetString(db.DriverName())
	setHidden(fields.FieldByName("unsafe")).SetBool(reflect.ValueOf(db).Elem().FieldByName("unsafe").Bool())
	return out, true
}

// setHidden returns the unexported field f as a settable value, through its address.
func setHidden(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// hiddenFields are the unexported fields of sqlx.Tx that db.BeginTxx copies from the DB,
// with their kinds.
var hiddenFields = map[string]reflect.Kind{"driverName": reflect.String, "unsafe": reflect.Bool}

// errLayout is non-nil when sqlx.DB and sqlx.Tx lack a field of hiddenFields or disagree
// on its type.
var errLayout = checkLayout()

func checkLayout() error {
	db, tx := reflect.TypeFor[sqlx.DB](), reflect.TypeFor[sqlx.Tx]()
	for name, kind := range hiddenFields {
		from, inDB := db.FieldByName(name)
		to, inTx := tx.FieldByName(name)
		if !inDB || !inTx || from.Type.Kind() != kind || to.Type.Kind() != kind || len(to.Index) != 1 {
			return errors.New("inboxsqlx: sqlx.Tx and sqlx.DB changed: field " + name)
		}
	}
	return nil
}

// Package inboxgorm gives a GORM handler the inbox transaction as a *gorm.DB.
//
// The inbox middleware (github.com/inboxkit/watermill-inbox) claims each message in a
// database/sql transaction and puts it in the message context. DB turns the application's
// one shared *gorm.DB into a session on that transaction, so that what the handler writes
// with GORM commits or rolls back together with the claim:
//
//	func (h *Handler) Handle(msg *message.Message) error {
//		db, ok := inboxgorm.DB(msg.Context(), h.db)
//		if !ok {
//			return errors.New("billing: no inbox transaction")
//		}
//		return db.Create(&Invoice{OrderID: msg.UUID}).Error
//	}
//
// The store must be made by sqlinbox.NewDB on the same database as h.db (the same *sql.DB
// is simplest: gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}))); GORM on pgx's
// pgx.Tx is not possible, GORM speaks database/sql.
//
// # What works, what ends the transaction, what escapes it
//
// A session costs a copy of GORM's statement (well under a microsecond), not an open:
// gorm.Open on the *sql.Tx for every message initialises a dialector and its callbacks, and
// with the MySQL driver also sends SELECT VERSION() unless SkipInitializeWithVersion is set.
//
// db.Transaction(func(tx *gorm.DB) error { ... }) inside the handler becomes a SAVEPOINT:
// it releases with the claim or rolls back alone. db.Commit() and db.Rollback() end the inbox
// transaction itself: the store then reports inbox.ErrTxEndedByHandler and the message is
// nacked. Anything written through the shared *gorm.DB (not the session DB returns) runs on
// the pool, commits on its own, and escapes the guarantee.
package inboxgorm

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	inbox "github.com/inboxkit/watermill-inbox"
)

// DB returns a session of db on the inbox transaction in ctx, with ctx as its context. db is
// the application's shared *gorm.DB; it is not changed, and the session is only valid while
// the handler runs.
//
// ok is false, and the returned *gorm.DB nil, when db is nil, when ctx carries no inbox
// transaction (it does not come from the inbox middleware, or the middleware runs in
// write-behind mode) and when the inbox transaction is not a *sql.Tx (a pgx store). DB never
// panics.
//
// If db was opened with PrepareStmt, the session prepares its statements on the
// transaction and caches them in db's statement cache, as GORM's own transactions do.
func DB(ctx context.Context, db *gorm.DB) (_ *gorm.DB, ok bool) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok || tx == nil || db == nil || db.Config == nil || db.Statement == nil {
		return nil, false
	}
	session := db.Session(&gorm.Session{Context: ctx, NewDB: true})
	if prepared, isPrepared := session.Statement.ConnPool.(*gorm.PreparedStmtDB); isPrepared {
		session.Statement.ConnPool = &gorm.PreparedStmtTX{Tx: tx, PreparedStmtDB: prepared}
	} else {
		session.Statement.ConnPool = tx
	}
	return session, true
}

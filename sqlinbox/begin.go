package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
)

// BeginFunc begins the inbox transaction of a store made by [NewDB], in place of the store's own
// db.BeginTx, so that the application's data layer begins it: handlers then get the data
// layer's own transaction value from inbox.TxFromContext, built by that library with its
// mapper, hooks and savepoints, instead of a bare [*sql.Tx]. handle is what handlers get; tx is
// the [*sql.Tx] under it, which the store claims in, commits and rolls back. The data layer must
// be on the store's [*sql.DB]. Build one with [BeginWith].
type BeginFunc func(ctx context.Context, opts *sql.TxOptions) (handle any, tx *sql.Tx, err error)

// BeginWith returns a Begin that begins the inbox transaction with begin, a data layer's
// method that begins a transaction of its own type T on the store's [*sql.DB], and reads the
// [*sql.Tx] under it with sqlTx:
//
//	// sqlx: handlers call inbox.TxFromContext[*sqlx.Tx]
//	sqlinbox.BeginWith(db.BeginTxx, func(tx *sqlx.Tx) *sql.Tx { return tx.Tx })
//	// bun: handlers call inbox.TxFromContext[bun.Tx]
//	sqlinbox.BeginWith(db.BeginTx, func(tx bun.Tx) *sql.Tx { return tx.Tx })
//
// A T that committed or rolled back (the handler called the data layer's Commit) ends the
// inbox transaction: the store then reports inbox.ErrTxEndedByHandler.
func BeginWith[T any](begin func(context.Context, *sql.TxOptions) (T, error), sqlTx func(T) *sql.Tx) BeginFunc {
	return func(ctx context.Context, opts *sql.TxOptions) (any, *sql.Tx, error) {
		handle, err := begin(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		tx := sqlTx(handle)
		if tx == nil {
			return nil, nil, errors.New("sqlinbox: Config.Begin's transaction has no *sql.Tx under it")
		}
		return handle, tx, nil
	}
}

// beginStd is the store's own Begin: handlers get the [*sql.Tx].
func beginStd(db *sql.DB) BeginFunc {
	return func(ctx context.Context, opts *sql.TxOptions) (any, *sql.Tx, error) {
		tx, err := db.BeginTx(ctx, opts)
		return tx, tx, err
	}
}

// Package inboxent gives an ent handler the inbox transaction as an ent driver.
//
// The inbox middleware (github.com/inboxkit/watermill-inbox) claims each message in a
// database/sql transaction and puts it in the message context. Driver returns an ent
// dialect.Driver on that transaction; a client of the application's generated package built
// on it writes in the inbox transaction, so its creates, updates and deletes commit or roll
// back with the claim:
//
//	func (h *Handler) Handle(msg *message.Message) error {
//		drv, ok := inboxent.Driver(msg.Context(), dialect.Postgres)
//		if !ok {
//			return errors.New("billing: no inbox transaction")
//		}
//		client := ent.NewClient(ent.Driver(drv)) // the application's generated package
//		return client.Invoice.Create().SetOrderID(msg.UUID).Exec(msg.Context())
//	}
//
// The store must be made by sqlinbox.NewDB (a *sql.Tx); ent on pgx's pgx.Tx is not possible,
// ent speaks database/sql.
//
// # Why a helper
//
// entsql.NewDriver(dialect, entsql.Conn{ExecQuerier: tx}) runs a plain Create, but ent asks
// its driver for a transaction of its own for UpdateOne, for creates with edges, and for
// client.Tx, and entsql.Driver begins it on a *sql.DB: over a *sql.Tx that is an interface
// conversion panic. The driver Driver returns opens a SAVEPOINT instead, so those operations
// stay atomic inside the inbox transaction, and a failed one rolls back alone.
//
// # What works, what ends the transaction, what escapes it
//
// Every query of a client on the driver runs inside the inbox transaction. client.Tx and
// client.BeginTx (default options only) are savepoints: their Commit releases the savepoint
// (it commits with the claim), their Rollback rolls back to it. UpdateOne and edge writes
// each cost a SAVEPOINT and a RELEASE round trip. Nothing through ent ends the inbox
// transaction; the client's Close does nothing. A client on the application's own driver
// (entsql.OpenDB) runs on the pool, commits on its own, and escapes the guarantee.
package inboxent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	inbox "github.com/inboxkit/watermill-inbox"
)

// ErrTxOptions is returned by the driver's BeginTx (the generated client's BeginTx) for
// options other than the defaults: a savepoint cannot change the isolation level or make
// the inbox transaction read-only.
var ErrTxOptions = errors.New("inboxent: a transaction inside the inbox transaction is a savepoint and takes no options")

// Driver returns an ent driver on the inbox transaction in ctx, for the dialect name
// (dialect.Postgres, dialect.MySQL or dialect.SQLite, as entsql.Open takes). The driver is
// only valid while the handler runs.
//
// ok is false, and the driver nil, when ctx carries no inbox transaction (it does not come
// from the inbox middleware, or the middleware runs in write-behind mode), when the inbox
// transaction is not a *sql.Tx (a pgx store), and for another dialect name. Driver never
// panics.
func Driver(ctx context.Context, name string) (_ dialect.Driver, ok bool) {
	tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
	if !ok || tx == nil {
		return nil, false
	}
	switch name {
	case dialect.Postgres, dialect.MySQL, dialect.SQLite:
	default:
		return nil, false
	}
	// A Conn that knows its dialect (for entsql.WithVar), on the transaction.
	conn := entsql.OpenDB(name, nil).Conn
	conn.ExecQuerier = tx
	return &txDriver{Conn: conn, dialect: name}, true
}

// txDriver is a dialect.Driver on the inbox transaction whose transactions are savepoints.
type txDriver struct {
	entsql.Conn
	dialect    string
	savepoints atomic.Int64 // names them
}

// Dialect implements dialect.Driver.
func (d *txDriver) Dialect() string { return d.dialect }

// Close implements dialect.Driver: the transaction belongs to the inbox middleware.
func (d *txDriver) Close() error { return nil }

// Tx implements dialect.Driver with a savepoint.
func (d *txDriver) Tx(ctx context.Context) (dialect.Tx, error) { return d.BeginTx(ctx, nil) }

// BeginTx is what the generated client's BeginTx calls: a savepoint, for default options.
func (d *txDriver) BeginTx(ctx context.Context, opts *sql.TxOptions) (dialect.Tx, error) {
	if opts != nil && (opts.Isolation != sql.LevelDefault || opts.ReadOnly) {
		return nil, ErrTxOptions
	}
	sp := &savepoint{Conn: d.Conn, ctx: context.WithoutCancel(ctx), name: fmt.Sprintf("inboxent_%d", d.savepoints.Add(1))}
	if err := d.Exec(ctx, "SAVEPOINT "+sp.name, []any{}, nil); err != nil {
		return nil, fmt.Errorf("inboxent: %w", err)
	}
	return sp, nil
}

// savepoint is a dialect.Tx: Commit releases it, Rollback rolls back to it.
type savepoint struct {
	entsql.Conn
	ctx  context.Context
	name string
}

// Commit releases the savepoint: its writes commit with the inbox transaction.
func (s *savepoint) Commit() error {
	return s.Exec(s.ctx, "RELEASE SAVEPOINT "+s.name, []any{}, nil)
}

// Rollback undoes what ran since the savepoint; the inbox transaction goes on.
func (s *savepoint) Rollback() error {
	return s.Exec(s.ctx, "ROLLBACK TO SAVEPOINT "+s.name, []any{}, nil)
}

package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
)

// NewDB returns a store that claims messages in table config.Table of db, in dialect, one
// statement at a time: PostgreSQL through pgx's stdlib, [MySQL]/MariaDB through
// go-sql-driver/mysql, [SQLite] through modernc.org/sqlite, or another database/sql driver of a
// database a [Dialect] speaks. Handlers get a [*sql.Tx] from inbox.TxFromContext[*sql.Tx], or,
// with [Config.Begin], the transaction their data layer began over it
// (inbox.TxFromContext[*sqlx.Tx]).
//
// The store does not see what a handler sends on its transaction, so a handler that takes it
// costs a check that the transaction is still the claim's before COMMIT: on PostgreSQL one
// statement (the claim's row was inserted by the current transaction), on [MySQL] and [SQLite]
// a savepoint sent when the handler takes the transaction and its RELEASE (a transaction's
// end drops its savepoints). A handler's own ROLLBACK, COMMIT or implicit commit is then an
// error wrapping inbox.ErrTxEndedByHandler, never an ack.
func NewDB(db *sql.DB, dialect Dialect, config Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlinbox: NewDB: db is nil")
	}
	if config.Dialect != nil {
		return nil, errors.New("sqlinbox: NewDB: Config.Dialect is for NewPgx and NewPgxPipeline; pass the dialect as NewDB's argument")
	}
	begin := config.Begin
	if begin == nil {
		begin = beginStd(db)
	}
	return newStore(&dbPool{sqlQuerier: sqlQuerier{db}, db: db, begin: begin}, dialect, config)
}

// dbPool runs a store's statements on a database/sql pool.
type dbPool struct {
	sqlQuerier // statements on the pool, each in a transaction of its own
	db         *sql.DB
	begin      BeginFunc // Config.Begin, or db.BeginTx
}

func (p *dbPool) session(context.Context) (session, error) { return &dbSession{pool: p}, nil }

// inTx begins the transaction without ctx's cancellation, because database/sql rolls a
// transaction back when the context it began with is done: f's statements stop with ctx, and
// the rollback follows.
func (p *dbPool) inTx(ctx context.Context, commit bool, f func(q querier) error) error {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("get a connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	err = f(sqlQuerier{tx})
	if err == nil && commit {
		return tx.Commit()
	}
	if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		// database/sql closes the connection, and with it the transaction and its locks.
		discard(conn)
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	return err
}

func (p *dbPool) hold(ctx context.Context, f func(q querier) (broken bool, err error)) error {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("get a connection: %w", err)
	}
	defer conn.Close()
	broken, err := f(sqlQuerier{conn})
	if broken {
		discard(conn)
	}
	return err
}

func (p *dbPool) maxConns() int { return p.db.Stats().MaxOpenConnections }

// checksTx: the handler's statements on the *sql.Tx reach the database without the store.
func (p *dbPool) checksTx() txCheckWhen { return txCheckIfHandedOut }

// claimSkips: a statement at a time, so the claim's row says before anything else is sent.
func (p *dbPool) claimSkips(bool) bool { return true }

// discard closes conn's driver connection instead of returning it to the pool: it may still
// be in a transaction, or hold a session lock.
func discard(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

// sqlRunner is what sqlQuerier runs statements on: a pool, a connection or a transaction.
type sqlRunner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sqlQuerier is a querier on database/sql.
type sqlQuerier struct{ r sqlRunner }

func (q sqlQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	result, err := q.r.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return result.RowsAffected()
}

func (q sqlQuerier) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = q.r.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

func (q sqlQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := q.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPgx returns a store that claims messages in table config.Table of PostgreSQL through
// pool, in pipelined batches; handlers get a [pgx.Tx] from inbox.TxFromContext[pgx.Tx].
//
// The store acquires a connection for each message and keeps it until the transaction ends,
// so that it can send statements in batches: BEGIN travels with the claim, and the
// statements a handler queued with inbox.ExecAtCommit, the record of produced messages and COMMIT
// travel together. A first delivery costs the round trips of the handler's own transaction,
// a duplicate two; write-behind mode (inbox.Config.WriteBehind) one. Every message in flight
// holds one of the pool's connections from its claim to its commit: size the pool (pgxpool's
// MaxConns) above the number of messages the router handles at once.
//
// The store follows the pool's ConnConfig.DefaultQueryExecMode. Keep pgx's default,
// QueryExecModeCacheStatement, the fastest (the other modes were 25-35% slower for the
// claim). In the caching modes the store prepares its statements by name on each connection,
// as pgx's cache does. In the modes that keep no statement on the server
// (QueryExecModeExec, QueryExecModeSimpleProtocol, QueryExecModeDescribeExec) it prepares
// nothing: set one of the first two behind a pooler in transaction mode (PgBouncer, RDS
// Proxy), where each transaction may run on another server connection (docs/pooler.md).
//
// [Config.Dialect] sets a PostgreSQL dialect of one's own. [Config.Begin] is refused:
// handlers of a pgx store get the [pgx.Tx].
func NewPgx(pool *pgxpool.Pool, config Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("sqlinbox: NewPgx: pool is nil")
	}
	if config.Begin != nil {
		return nil, errors.New("sqlinbox: NewPgx: Config.Begin is for stores made by NewDB; handlers of a pgx store get the pgx.Tx")
	}
	dialect := config.Dialect
	if dialect == nil {
		dialect = Postgres{}
	}
	if err := checkDialect(dialect); err != nil {
		return nil, err
	}
	if _, ok := dialect.(interface{ postgres() }); !ok {
		return nil, fmt.Errorf("sqlinbox: NewPgx: Config.Dialect %s (%T) does not embed sqlinbox.Postgres: "+
			"a pgx store speaks PostgreSQL; give NewDB a dialect of another database", dialect.Name(), dialect)
	}
	p := &pgxPool{pgxQuerier: pgxQuerier{pool}, pool: pool}
	s, err := newStore(p, dialect, config)
	if err != nil {
		return nil, err
	}
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	p.begin, p.selectClaim, p.named, p.describes = s.sql.begin, s.selectClaimSQL, namesStatements(mode), mode == pgx.QueryExecModeDescribeExec
	p.simple = mode == pgx.QueryExecModeSimpleProtocol
	return s, nil
}

// pgxPool runs a store's statements on a pgx pool.
type pgxPool struct {
	pgxQuerier  // statements on the pool, each in a transaction of its own
	pool        *pgxpool.Pool
	begin       string
	selectClaim func() string // the store's read of a duplicate, which a check that finds the column unpublished changes

	// named is set when the pool's mode caches statements: the store prepares its texts by
	// name too (see prepare). describes is set in QueryExecModeDescribeExec, where pgx
	// describes every batch before it sends it.
	named, describes bool
	// simple is set in QueryExecModeSimpleProtocol, where pgx sends a batch as one query
	// string (see refusedWhole).
	simple bool

	// prepared counts the queued statement texts that batches prepare by name on each
	// connection, up to maxNamedStatements; see prepare.
	prepared      sync.Map
	preparedCount atomic.Int32
}

// namesStatements reports whether mode keeps prepared statements on the server connection,
// so the store may keep its own there too. pgx's zero mode is its default,
// QueryExecModeCacheStatement.
func namesStatements(mode pgx.QueryExecMode) bool {
	switch mode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec:
		return false
	}
	return true
}

func (p *pgxPool) session(ctx context.Context) (session, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxSession{pool: p, conn: conn}, nil
}

func (p *pgxPool) inTx(ctx context.Context, commit bool, f func(q querier) error) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return fmt.Errorf("begin: %w", err)
	}
	err = f(pgxQuerier{tx})
	if err == nil && commit {
		err = tx.Commit(ctx)
		conn.Release()
		return err
	}
	if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
		// Closing the connection ends the transaction, and with it any lock it holds.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
		return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
	}
	conn.Release()
	return err
}

func (p *pgxPool) hold(ctx context.Context, f func(q querier) (broken bool, err error)) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	broken, err := f(pgxQuerier{conn})
	if broken {
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	} else {
		conn.Release()
	}
	return err
}

func (p *pgxPool) maxConns() int { return int(p.pool.Config().MaxConns) }

// checksTx: the handler's pgx.Tx refuses what would end the transaction, and the session reads
// the server's transaction status before COMMIT.
func (p *pgxPool) checksTx() txCheckWhen { return txCheckNever }

// claimSkips: the claim-first mode's batch ends with the claim, whose row says; write-behind
// mode's goes on after it.
func (p *pgxPool) claimSkips(writeBehind bool) bool { return !writeBehind }

// pgxRunner is what pgxQuerier runs statements on: a pool, a connection or a transaction.
type pgxRunner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgxQuerier is a querier on pgx.
type pgxQuerier struct{ r pgxRunner }

func (q pgxQuerier) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.r.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q pgxQuerier) queryInt(ctx context.Context, query string, args ...any) (v sql.NullInt64, err error) {
	err = q.r.QueryRow(ctx, query, args...).Scan(&v)
	return v, err
}

func (q pgxQuerier) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := q.r.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{r}, nil
}

// pgxRows gives [pgx.Rows] the Close of [*sql.Rows].
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return r.Err() }

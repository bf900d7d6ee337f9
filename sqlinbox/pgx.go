package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
)

// PgxStore is an inbox.Store on PostgreSQL through a pgx v5 pool. Handlers get a pgx.Tx
// from inbox.TxFromContext[pgx.Tx].
//
// The store acquires a connection for each message and keeps it until the transaction ends,
// so it can send statements in pipelined batches: BEGIN travels with the claim, and the
// statements a handler queued with inbox.Queue, the record of produced messages and COMMIT
// travel together. A first delivery costs the round trips of the handler's own transaction,
// a duplicate two. In write-behind mode (inbox.Config.WriteBehind) everything travels in one
// batch: one round trip. Keep pgx's default statement cache (QueryExecModeCacheStatement):
// the other modes were 25-35% slower for the claim.
//
// The store follows the pool's ConnConfig.DefaultQueryExecMode. In the caching modes
// (QueryExecModeCacheStatement, QueryExecModeCacheDescribe) it prepares its statements by
// name on each connection, as pgx's cache does. In the modes that keep no statement on the
// server (QueryExecModeExec, QueryExecModeSimpleProtocol, QueryExecModeDescribeExec) it
// prepares nothing and keeps nothing per connection: set one of the first two behind a
// pooler in transaction mode (PgBouncer, RDS Proxy), where each transaction may run on
// another server connection (docs/pooler.md).
type PgxStore struct {
	pool  *pgxpool.Pool
	sql   statements
	guard *tableGuard // checks the table before the first claim

	// named is set when the pool's mode caches statements: the store prepares its texts by
	// name too (see prepareNamed). describes is set in QueryExecModeDescribeExec, where pgx
	// describes every batch before it sends it.
	named, describes bool

	// prepared counts the queued statement texts that write-behind batches prepare by name
	// on each connection, up to maxNamedStatements; see prepareNamed.
	prepared      sync.Map
	preparedCount atomic.Int32
}

var (
	_ inbox.Store            = (*PgxStore)(nil)
	_ inbox.WriteBehindStore = (*PgxStore)(nil)
)

// NewPgx returns a store that claims messages in table config.Table through pool. Every
// message in flight holds one of the pool's connections from its claim to its commit: size
// the pool (pgxpool's MaxConns) above the number of messages the router handles at once.
func NewPgx(pool *pgxpool.Pool, config Config) (*PgxStore, error) {
	if pool == nil {
		return nil, errors.New("sqlinbox: NewPgx: pool is nil")
	}
	if config.Begin != nil {
		return nil, errors.New("sqlinbox: NewPgx: Config.Begin is for stores made by New; handlers of a pgx store get the pgx.Tx")
	}
	sql, err := newStatements(Postgres(), config)
	if err != nil {
		return nil, err
	}
	mode := pool.Config().ConnConfig.DefaultQueryExecMode
	return &PgxStore{pool: pool, sql: sql, guard: newTableGuard(config.Logger),
		named: namesStatements(mode), describes: mode == pgx.QueryExecModeDescribeExec}, nil
}

// namesStatements reports whether mode keeps prepared statements on the server
// connection, so the store may keep its own there too. pgx's zero mode is its default,
// QueryExecModeCacheStatement.
func namesStatements(mode pgx.QueryExecMode) bool {
	switch mode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec:
		return false
	}
	return true
}

// InitializeSchema creates the inbox table if it does not exist, then checks it (see
// CheckTable): a table found in a shape that cannot guard is an error wrapping
// ErrTableMismatch. It is safe to call on every start, from every instance at once.
func (s *PgxStore) InitializeSchema(ctx context.Context) error {
	return afterSchema(ctx, s.createSchema(ctx), s.CheckTable)
}

func (s *PgxStore) createSchema(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.schemaLock); err != nil {
			return fmt.Errorf("sqlinbox: lock for schema: %w", err)
		}
		for _, statement := range s.sql.schema {
			if _, err := tx.Exec(ctx, statement); err != nil {
				return fmt.Errorf("sqlinbox: create inbox table: %w", err)
			}
		}
		return nil
	})
}

// Claim implements inbox.Store. BEGIN, the lock timeout (if set) and the claim travel in
// one batch. A duplicate's ROLLBACK and the read of the committed claim share a second.
func (s *PgxStore) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	if err := s.guardTable(ctx); err != nil {
		return nil, nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: acquire a connection: %w", err)
	}
	own := []string{s.sql.insertOrSkip, sqlRollback, s.sql.prior}
	if err := s.prepareNamed(ctx, conn.Conn(), own, nil); err != nil {
		conn.Release()
		return nil, nil, err
	}
	batch := &pgx.Batch{}
	batch.BeginTx(pgx.TxOptions{})
	s.queueLockTimeout(batch)
	batch.Queue(s.sql.insertOrSkip, claim.Consumer, claim.Key, claim.Fingerprint)
	results := conn.Conn().SendBatch(ctx, batch)
	tx := results.Tx()
	inserted, err := readClaim(results, s.sql.lockTimeout != "")
	if closeErr := results.Close(); err == nil && closeErr != nil {
		err = fmt.Errorf("sqlinbox: claim: %w", closeErr)
	}
	switch {
	case err != nil:
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			err = errors.Join(err, fmt.Errorf("sqlinbox: end the claim's transaction: %w", rbErr))
		}
		conn.Release()
		return nil, nil, err
	case !inserted:
		// The read runs after ROLLBACK, outside the transaction: its snapshot also sees a
		// claim committed while this one waited for it. A connection left in a transaction
		// by a failure is closed when it is released.
		prior, err := s.readAfterDuplicate(ctx, conn.Conn(), claim)
		conn.Release()
		return nil, prior, err
	}
	return &pgxTx{conn: conn, tx: tx, store: s, claim: claim}, nil, nil
}

func (s *PgxStore) queueLockTimeout(batch *pgx.Batch) {
	if s.sql.lockTimeout != "" {
		batch.Queue(s.sql.lockTimeout, s.sql.lockTimeoutArgs...)
	}
}

// readClaim reads the results of BEGIN, the lock timeout (if set) and the claim, which
// returns a row only if it inserted.
func readClaim(results pgx.BatchResults, withLockTimeout bool) (inserted bool, err error) {
	if _, err := results.Exec(); err != nil {
		return false, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	if withLockTimeout {
		if _, err := results.Exec(); err != nil {
			return false, fmt.Errorf("sqlinbox: set lock timeout: %w", err)
		}
	}
	switch err := results.QueryRow().Scan(&inserted); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	return inserted, nil
}

// readAfterDuplicate ends the aborted transaction and reads what the committed claim
// recorded, in one batch.
func (s *PgxStore) readAfterDuplicate(ctx context.Context, c *pgx.Conn, claim inbox.Claim) (*inbox.Processed, error) {
	if s.describes && c.PgConn().TxStatus() == 'E' {
		// The server describes nothing in an aborted transaction: ROLLBACK goes first, alone
		// (a statement without parameters is one round trip in every mode). The read then
		// runs outside a transaction, where a pooler may run describe-exec's two round trips
		// on two server connections: it runs in exec mode, in one.
		if _, err := c.Exec(ctx, sqlRollback); err != nil {
			return nil, fmt.Errorf("sqlinbox: end the duplicate's transaction: %w", err)
		}
		return scanPrior(c.QueryRow(ctx, s.sql.prior, pgx.QueryExecModeExec, claim.Consumer, claim.Key))
	}
	batch := &pgx.Batch{}
	batch.Queue(sqlRollback)
	batch.Queue(s.sql.prior, claim.Consumer, claim.Key)
	results := c.SendBatch(ctx, batch)
	_, err := results.Exec()
	var prior *inbox.Processed
	if err == nil {
		prior, err = scanPrior(results.QueryRow())
	} else {
		err = fmt.Errorf("sqlinbox: end the duplicate's transaction: %w", err)
	}
	if closeErr := results.Close(); err == nil && closeErr != nil {
		err = fmt.Errorf("sqlinbox: read the committed claim: %w", closeErr)
	}
	return prior, err
}

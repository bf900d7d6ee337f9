package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	pool *pgxpool.Pool
	sql  statements

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
	return &PgxStore{pool: pool, sql: sql, named: namesStatements(mode), describes: mode == pgx.QueryExecModeDescribeExec}, nil
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

// ClaimAndCommit implements inbox.WriteBehindStore in one round trip: BEGIN, the lock
// timeout (if set), the claim as a plain INSERT, the statements, the record of produced
// messages and COMMIT in one batch. A duplicate makes the claim fail on the primary key, which aborts the
// transaction and skips the rest of the batch; ROLLBACK and the read of the committed claim
// then share a second batch.
func (s *PgxStore) ClaimAndCommit(ctx context.Context, claim inbox.Claim, statements []inbox.Statement, produced []byte) (*inbox.Processed, error) {
	if err := s.guardTable(ctx); err != nil {
		return nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: acquire a connection: %w", err)
	}
	defer conn.Release() // a connection left in a transaction is closed, not reused
	c := conn.Conn()
	queued := make([]queuedStatement, len(statements))
	for i, st := range statements {
		queued[i] = queuedStatement{st.SQL, st.Args}
	}
	// ROLLBACK and the read of the record too: after a duplicate the transaction is
	// aborted, and the server refuses to prepare anything until it ends.
	own := []string{sqlBegin, s.sql.insert, s.sql.record, sqlCommit, sqlRollback, s.sql.prior}
	if err := s.prepareNamed(ctx, c, own, queued); err != nil {
		return nil, err
	}

	batch := &pgx.Batch{}
	batch.Queue(sqlBegin)
	s.queueLockTimeout(batch)
	claimAt := batch.Len()
	batch.Queue(s.sql.insert, claim.Consumer, claim.Key, claim.Fingerprint)
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	if produced != nil {
		batch.Queue(s.sql.record, produced, claim.Consumer, claim.Key)
	}
	batch.Queue(sqlCommit)
	failedAt, err := sendBatch(ctx, c, batch)
	switch {
	case err == nil:
		return nil, nil
	case failedAt == claimAt && s.sql.isDuplicateKey(err):
		return s.readAfterDuplicate(ctx, c, claim)
	case failedAt == batch.Len()-1:
		return nil, fmt.Errorf("sqlinbox: commit: %w", err)
	case failedAt == claimAt:
		return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: claim: %w", err))
	case failedAt > claimAt+len(queued):
		return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: record produced messages: %w", err))
	}
	return nil, endFailed(ctx, c, fmt.Errorf("sqlinbox: queued statement %d: %w", failedAt-claimAt, err))
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

// maxNamedStatements bounds the queued statement texts a connection prepares by name, so a
// handler that builds its SQL text from data cannot fill the server's memory.
const maxNamedStatements = 256

// prepareNamed prepares on c, by name, the inbox's statements texts and the first
// maxNamedStatements distinct texts of queued statements, where they are not prepared yet.
// pgx's Prepare with name == sql makes the text itself name the statement, and returns at
// once for a text already prepared on the connection. pgx forgets the cached statements of
// a batch that fails, which would make the batch after every write-behind duplicate prepare
// them again; named statements are kept. Every batch that can fail prepares its texts so,
// so that no text is both named and in pgx's cache.
//
// In a mode that keeps no statement on the server it does nothing: pgx sends each text with
// its parameters (exec, describe-exec) or as a simple query, and a transaction pooler may
// run the next transaction on a server connection that never saw the name.
func (s *PgxStore) prepareNamed(ctx context.Context, c *pgx.Conn, own []string, queued []queuedStatement) error {
	if !s.named {
		return nil
	}
	if s.sql.lockTimeout != "" {
		own = append(own, s.sql.lockTimeout)
	}
	for _, text := range own {
		if _, err := c.Prepare(ctx, text, text); err != nil {
			return fmt.Errorf("sqlinbox: prepare: %w", err)
		}
	}
	for _, q := range queued {
		if !s.namedStatement(q.sql) {
			continue
		}
		if _, err := c.Prepare(ctx, q.sql, q.sql); err != nil {
			return fmt.Errorf("sqlinbox: prepare queued statement: %w", err)
		}
	}
	return nil
}

// namedStatement reports whether text is one of the first maxNamedStatements queued texts.
func (s *PgxStore) namedStatement(text string) bool {
	if _, ok := s.prepared.Load(text); ok {
		return true
	}
	if s.preparedCount.Add(1) > maxNamedStatements {
		s.preparedCount.Add(-1)
		return false
	}
	if _, loaded := s.prepared.LoadOrStore(text, struct{}{}); loaded {
		s.preparedCount.Add(-1)
	}
	return true
}

// sendBatch sends batch on c and reads every result. It returns the index of the statement
// that failed with its error; the statements after it did not run.
func sendBatch(ctx context.Context, c *pgx.Conn, batch *pgx.Batch) (failedAt int, err error) {
	results := c.SendBatch(ctx, batch)
	var tag pgconn.CommandTag
	for failedAt = 0; failedAt < batch.Len(); failedAt++ {
		if tag, err = results.Exec(); err != nil {
			break
		}
	}
	if closeErr := results.Close(); err == nil && closeErr != nil {
		return batch.Len() - 1, closeErr
	}
	if err == nil && tag.String() == "ROLLBACK" { // the server rolled back instead, as pgx's Commit reports
		return batch.Len() - 1, pgx.ErrTxCommitRollback
	}
	return failedAt, err
}

// endFailed rolls back the transaction a failed batch left open, if the connection still
// works; a broken connection is closed when it is released.
func endFailed(ctx context.Context, c *pgx.Conn, err error) error {
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return err
	}
	if _, rbErr := c.Exec(context.WithoutCancel(ctx), sqlRollback); rbErr != nil {
		return errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
	}
	return err
}

// pgxTx is the transaction of one claimed message, on a connection the store holds until
// Commit or Rollback.
type pgxTx struct {
	conn  *pgxpool.Conn
	tx    pgx.Tx // what the handler writes through
	store *PgxStore
	claim inbox.Claim
	statementQueue
}

var _ inbox.StatementQueuer = (*pgxTx)(nil)

func (t *pgxTx) Driver() any { return t.tx }

// Commit sends the queued statements, the record of produced messages and COMMIT in one
// pipelined batch: one round trip, whatever the handler queued; with nothing to send but
// COMMIT, pgx's Tx.Commit sends it. It always releases the connection.
func (t *pgxTx) Commit(ctx context.Context, produced []byte) error {
	defer t.conn.Release()
	c := t.conn.Conn()
	if c.PgConn().TxStatus() == 'I' {
		return fmt.Errorf("%w: commit", inbox.ErrTxEndedByHandler)
	}
	queued := t.take()
	if len(queued) == 0 && produced == nil {
		return pgxEnded(t.tx.Commit(ctx))
	}
	if err := t.store.prepareNamed(ctx, c, []string{t.store.sql.record, sqlCommit}, queued); err != nil {
		return endFailed(ctx, c, err)
	}
	batch := &pgx.Batch{}
	for _, q := range queued {
		batch.Queue(q.sql, q.args...)
	}
	if produced != nil {
		batch.Queue(t.store.sql.record, produced, t.claim.Consumer, t.claim.Key)
	}
	batch.Queue(sqlCommit)
	if _, err := sendBatch(ctx, c, batch); err != nil {
		return endFailed(ctx, c, fmt.Errorf("sqlinbox: commit batch: %w", err))
	}
	return nil
}

// Rollback ends the transaction and releases the connection.
func (t *pgxTx) Rollback(ctx context.Context) error {
	defer t.conn.Release()
	return pgxEnded(t.tx.Rollback(ctx))
}

// pgxEnded marks the error of a transaction the handler already committed or rolled back.
func pgxEnded(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

// CheckTable is SQLStore.CheckTable for the pgx store.
func (s *PgxStore) CheckTable(ctx context.Context) error {
	return s.sql.guard.check(ctx, s.sql.table, s.describe)
}

// describe reads the table's shape in a transaction of its own: behind a pooler in
// transaction mode, a statement that the driver sends in steps (pgx's describe-exec mode)
// could otherwise have its steps run on two server connections and fail.
func (s *PgxStore) describe(ctx context.Context) (primaryKey string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		primaryKey, err = describeTable(ctx, s.sql.dialect, s.sql.table, func(ctx context.Context, text string, args ...any) (tableRows, error) {
			rows, err := tx.Query(ctx, text, args...)
			if err != nil {
				return nil, err
			}
			return pgxRows{rows}, nil
		})
		return err
	})
	return primaryKey, err
}

// guardTable returns nil once the store's table passed its check; see CheckTable.
func (s *PgxStore) guardTable(ctx context.Context) error {
	return s.sql.guard.before(ctx, s.sql.table, s.describe)
}

// pgxRows gives pgx.Rows the Close of *sql.Rows.
type pgxRows struct{ rowsCloser }

type rowsCloser interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

func (r pgxRows) Close() error { r.rowsCloser.Close(); return r.Err() }

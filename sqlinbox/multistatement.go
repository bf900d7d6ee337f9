package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/txmark"
)

// NewMultiStatement opens a pool on connector and returns a store on it that sends each
// message as multi-statement requests, several statements as one request, to save round
// trips, and the pool, which the application uses for its other work too: everything else
// passes through it unchanged. Close the pool when done.
//
//   - Write-behind mode (inbox.Config.WriteBehind): BEGIN, the lock timeout, the claim, the
//     statements the handler queued, the record of its produced messages and COMMIT in one
//     request, one round trip.
//   - The claim-first mode: START TRANSACTION, the lock timeout and the claim in one request;
//     the queued statements, the record and COMMIT in another. A handler that writes through
//     the *sql.Tx sends its statements and COMMIT one request each (3 round trips for one
//     statement), one that queues them with inbox.ExecAtCommit 2.
//
// Handlers get a [*sql.Tx] from inbox.TxFromContext[*sql.Tx], as with a store made by [NewDB].
// A node of a Galera or Percona XtraDB Cluster refuses it (see [ErrMultiStatementRefused]): use
// NewDB there.
//
// connector is go-sql-driver/mysql's (mysql.NewConnector), with MultiStatements and
// InterpolateParams set in its [Config] (the DSN's multiStatements=true&interpolateParams=true):
// the driver must run several statements in one call with the parameters written into the
// text. Without them CheckTable and every message fail with an error wrapping
// [ErrMultiStatementRefused] that says so, and the message is nacked. Queued statements must
// then hold no "?" other than their parameters, and be one statement each: a request whose
// server ran more or fewer statements than it holds (a queued text of two statements, or one
// that ends in an unterminated comment) is rolled back and its message nacked, never taken as
// committed. multiStatements widens what a statement built from input could do, and
// client-side interpolation is unsafe in some character sets, which the store refuses (see
// [MySQL]; SECURITY.md).
//
// dialect must have MultiStatement SQL ([MySQL] has). [Config.Begin] is refused: a message's
// transaction begins in a request of the store's own.
func NewMultiStatement(connector driver.Connector, dialect Dialect, config Config) (*Store, *sql.DB, error) {
	if connector == nil {
		return nil, nil, errors.New("sqlinbox: NewMultiStatement: connector is nil")
	}
	if err := checkDialect(dialect); err != nil {
		return nil, nil, err
	}
	multi := dialect.MultiStatement()
	if multi == nil || multi.Probe == "" {
		return nil, nil, fmt.Errorf("sqlinbox: NewMultiStatement: dialect %q has no MultiStatement SQL: use NewDB", dialect.Name())
	}
	if config.Dialect != nil {
		return nil, nil, errors.New("sqlinbox: NewMultiStatement: Config.Dialect is for NewPgx and NewPgxPipeline; pass the dialect as NewMultiStatement's argument")
	}
	if config.Begin != nil {
		return nil, nil, errors.New("sqlinbox: NewMultiStatement: Config.Begin cannot be used: " +
			"a message's transaction begins in a multi-statement request of the store's own; use NewDB for Config.Begin")
	}
	db := sql.OpenDB(&multiStatementConnector{connector})
	p := &multiPool{dbPool: dbPool{sqlQuerier: sqlQuerier{db}, db: db, begin: beginStd(db)}, multi: multi}
	s, err := newStore(p, dialect, config)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	p.beginText = s.sql.begin
	s.refusal = newVerdict(ErrMultiStatementRefused, 0, config.Logger,
		"Multi-statement requests refused: every message fails; set the DSN's multiStatements=true and interpolateParams=true, or on a Galera node make the store with sqlinbox.NewDB", nil)
	return s, db, nil
}

// multiPool runs a store's messages as multi-statement requests on the pool [NewMultiStatement]
// opened; everything else runs as on any database/sql pool.
type multiPool struct {
	dbPool
	multi     *MultiStatementSQL
	beginText string
}

func (p *multiPool) session(ctx context.Context) (session, error) {
	// The connection is the store's until the transaction ends: the claim's request runs on
	// it before database/sql's transaction exists.
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &multiSession{pool: p, conn: conn}, nil
}

// checksTx: the mark travels in the claim's request, the check in the commit's.
func (p *multiPool) checksTx() txCheckWhen { return txCheckAlways }

// claimSkips: a request's results are not read one by one, and its duplicate-key error stops
// it.
func (p *multiPool) claimSkips(bool) bool { return false }

// multiSession is one message's transaction on a connection of [NewMultiStatement]'s pool.
type multiSession struct {
	pool *multiPool
	conn *sql.Conn
	tx   *sql.Tx // the transaction the claim's request began, adopted by database/sql
	sqlSessionState
}

func (s *multiSession) begin(ctx context.Context, first []statement) (int, error) {
	text, args := request(s.pool.beginText, first, "")
	var requestErr error
	err := s.conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*multiStatementConn)
		if !ok {
			return fmt.Errorf("sqlinbox: connection %T does not come from NewMultiStatement's pool", driverConn)
		}
		requestErr = c.beginWith(ctx, text, len(first)+1, args)
		if errors.Is(requestErr, driver.ErrBadConn) {
			return requestErr // database/sql closes the connection
		}
		return nil
	})
	if err != nil {
		return failedSetup, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	if requestErr != nil {
		return failedUnknown, requestErr
	}
	// The claim is in: from here on the middleware, not the message context, ends the
	// transaction.
	if s.tx, err = s.conn.BeginTx(context.WithoutCancel(ctx), nil); err != nil {
		discard(s.conn)
		return failedSetup, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	return 0, nil
}

func (s *multiSession) handle() any { return s.tx }

// commit sends statements with COMMIT as one request; without statements COMMIT goes alone.
func (s *multiSession) commit(ctx context.Context, statements []statement) (int, error) {
	if len(statements) == 0 {
		return 0, sqlEnded(s.tx.Commit())
	}
	text, args := request("", statements, "")
	if _, err := s.tx.ExecContext(ctx, text, append(args, endsInCommit{len(statements)})...); err != nil {
		return failedUnknown, sqlEnded(err)
	}
	return len(statements), sqlEnded(s.tx.Commit()) // sends nothing: the request committed
}

func (s *multiSession) run(ctx context.Context, statements []statement) (int, error) {
	text, args := request(s.pool.beginText, statements, sqlCommit)
	if _, err := s.conn.ExecContext(txmark.With(ctx, txmark.Begins|txmark.Ends), text, append(args, holdsStatements{len(statements) + 2})...); err != nil {
		return failedUnknown, err
	}
	return 0, nil
}

func (s *multiSession) rollback(context.Context) error { return s.rolledBack(s.tx.Rollback()) }

// rollbackAndSelect sends ROLLBACK and the read of the committed claim as one request.
func (s *multiSession) rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error) {
	ctx = context.WithoutCancel(ctx) // the transaction must end, whatever happens to ctx
	rows, err := s.conn.QueryContext(txmark.With(ctx, txmark.Ends), sqlRollback+requestSeparator+read.sql, read.args...)
	if err != nil {
		discard(s.conn)
		return nil, fmt.Errorf("sqlinbox: rollback: %w", err)
	}
	defer rows.Close()
	// go-sql-driver/mysql skips ROLLBACK's empty result; a driver that does not gives it first.
	for !rows.Next() {
		if !rows.NextResultSet() {
			return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", errors.Join(rows.Err(), sql.ErrNoRows))
		}
	}
	return scanClaim(rows, read.marks)
}

// abort ends the transaction a failed request left open and, after a request that began a
// transaction, tells a driver that cannot send multi-statement requests from every other
// failure.
func (s *multiSession) abort(ctx context.Context, cause error) error {
	ctx = context.WithoutCancel(ctx) // the transaction must end, whatever happens to ctx
	if s.tx != nil {
		if err := s.rolledBack(s.tx.Rollback()); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return errors.Join(cause, fmt.Errorf("sqlinbox: rollback: %w", err))
		}
		return cause
	}
	if _, err := s.conn.ExecContext(txmark.With(ctx, txmark.Ends), sqlRollback); err != nil {
		discard(s.conn)
		s.broken = true
		return errors.Join(cause, fmt.Errorf("sqlinbox: rollback: %w", err))
	}
	if _, err := s.conn.ExecContext(ctx, s.pool.multi.Probe, 1, 1); err != nil {
		return fmt.Errorf("%w (a multi-statement store needs a driver that runs several statements in one call, "+
			"with the parameters in the text: go-sql-driver/mysql's multiStatements=true and interpolateParams=true)", cause)
	}
	return cause
}

// queryString reads one string on the session's connection.
func (s *multiSession) queryString(ctx context.Context, query string) (v string, err error) {
	if s.tx != nil {
		err = s.tx.QueryRowContext(ctx, query).Scan(&v)
	} else {
		err = s.conn.QueryRowContext(ctx, query).Scan(&v)
	}
	return v, err
}

func (s *multiSession) release() { _ = s.conn.Close() }

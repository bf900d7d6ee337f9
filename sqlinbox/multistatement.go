package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	inbox "github.com/inboxkit/watermill-inbox"
)

// MultiStatementStore is an inbox.Store on MySQL or MariaDB that sends each message as
// multi-statement requests, several statements sent as one request, to save round trips:
//
//   - write-behind mode (inbox.Config.WriteBehind): BEGIN, the lock timeout, the claim, the
//     statements the handler queued, the record of its produced messages and COMMIT in one
//     request, one round trip;
//   - the claim-first mode: START TRANSACTION, the lock timeout and the claim in one request;
//     the queued statements, the record and COMMIT in another. A handler that writes through
//     the *sql.Tx sends its statements and COMMIT one request each (3 round trips for one
//     statement), one that queues them with inbox.Queue 2.
//
// Handlers get a *sql.Tx from inbox.TxFromContext[*sql.Tx], as with a SQLStore; everything
// else a SQLStore does (InitializeSchema, CheckTable, retention) it does the same. Build one
// with NewMultiStatement. A node of a Galera or Percona XtraDB Cluster refuses it (see
// ErrMultiStatementRefused): use New there.
type MultiStatementStore struct {
	store *SQLStore
	multi *MultiStatementSQL
	guard *multiStatementGuard
}

var (
	_ inbox.Store            = (*MultiStatementStore)(nil)
	_ inbox.WriteBehindStore = (*MultiStatementStore)(nil)
	_ Cleaner                = (*MultiStatementStore)(nil)
	_ countedCleaner         = (*MultiStatementStore)(nil)
	_ countedCleaner         = (*SQLStore)(nil)
	_ countedCleaner         = (*PgxStore)(nil)
)

// NewMultiStatement opens a pool on connector and returns a store on it that sends each
// message as multi-statement requests (see MultiStatementStore), and the pool, which the
// application uses for its other work too: everything else passes through it unchanged.
// Close the pool when done.
//
// connector is go-sql-driver/mysql's (mysql.NewConnector), with MultiStatements and
// InterpolateParams set in its Config (the DSN's multiStatements=true&interpolateParams=true):
// the driver must run several statements in one call with the parameters written into the
// text. Without them every message fails with an error that says so, and is nacked. Queued
// statements must then hold no "?" other than their parameters. multiStatements widens what
// a statement built from input could do (SECURITY.md).
//
// dialect must have MultiStatement SQL (MySQL() has). Config.Begin is refused: a message's
// transaction begins in a request of the store's own.
func NewMultiStatement(connector driver.Connector, dialect Dialect, config Config) (*MultiStatementStore, *sql.DB, error) {
	if connector == nil {
		return nil, nil, errors.New("sqlinbox: NewMultiStatement: connector is nil")
	}
	if dialect.MultiStatement == nil {
		return nil, nil, fmt.Errorf("sqlinbox: NewMultiStatement: dialect %q has no MultiStatement SQL: use New", dialect.Name)
	}
	if config.Begin != nil {
		return nil, nil, errors.New("sqlinbox: NewMultiStatement: Config.Begin cannot be used: " +
			"a message's transaction begins in a multi-statement request of the store's own; use New for Config.Begin")
	}
	db := sql.OpenDB(&multiStatementConnector{connector})
	store, err := New(db, dialect, config)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return &MultiStatementStore{store: store, multi: dialect.MultiStatement, guard: newMultiStatementGuard(config.Logger)}, db, nil
}

// InitializeSchema is SQLStore.InitializeSchema.
func (s *MultiStatementStore) InitializeSchema(ctx context.Context) error {
	return s.store.InitializeSchema(ctx)
}

// CheckTable is SQLStore.CheckTable.
func (s *MultiStatementStore) CheckTable(ctx context.Context) error { return s.store.CheckTable(ctx) }

// Cleanup implements Cleaner, as SQLStore.Cleanup.
func (s *MultiStatementStore) Cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig) (int64, error) {
	return s.store.Cleanup(ctx, olderThan, config)
}

// cleanup is Cleanup with a RetentionRunner's counter, made once for all its passes.
func (s *MultiStatementStore) cleanup(ctx context.Context, olderThan time.Duration, config CleanupConfig, rowsCleaned metric.Int64Counter) (int64, error) {
	return s.store.cleanup(ctx, olderThan, config, rowsCleaned)
}

// CountExpired is SQLStore.CountExpired.
func (s *MultiStatementStore) CountExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	return s.store.CountExpired(ctx, olderThan)
}

// TableSize is SQLStore.TableSize.
func (s *MultiStatementStore) TableSize(ctx context.Context) (bytes int64, note string, err error) {
	return s.store.TableSize(ctx)
}

// Claim implements inbox.Store: START TRANSACTION, the lock timeout and the claim go as one
// request, and the transaction the handler gets is the one that request began. A duplicate
// costs one more request: ROLLBACK and the read of the committed claim.
func (s *MultiStatementStore) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	if err := s.before(ctx, claimFirstMultiStatement); err != nil {
		return nil, nil, err
	}
	sql := s.store.sql
	var request strings.Builder
	var args []any
	if sql.lockTimeout != "" {
		request.WriteString(sql.lockTimeout + "; ")
		args = append(args, sql.lockTimeoutArgs...)
	}
	request.WriteString(sql.insert)
	args = append(args, claim.Consumer, claim.Key, claim.Fingerprint)

	// The connection is the store's until the transaction ends: the claim's request runs on
	// it before database/sql's transaction exists.
	conn, err := s.store.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: connection: %w", err)
	}
	var claimErr error
	err = conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*multiStatementConn)
		if !ok {
			return fmt.Errorf("sqlinbox: connection %T does not come from NewMultiStatement's pool", driverConn)
		}
		claimErr = c.beginWith(ctx, request.String(), args)
		if errors.Is(claimErr, driver.ErrBadConn) {
			return claimErr // database/sql closes the connection
		}
		return nil
	})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	if claimErr != nil {
		defer conn.Close()
		prior, err := s.afterFailedRequest(ctx, conn, claim, fmt.Errorf("sqlinbox: claim: %w", claimErr))
		return nil, prior, err
	}
	// The claim is in: from here on the middleware, not the message context, ends the
	// transaction (see detachedAfterClaim).
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		discard(conn)
		_ = conn.Close()
		return nil, nil, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	return &sqlTx{tx: tx, handle: tx, store: s.store, claim: claim, conn: conn}, nil, nil
}

// before returns nil once the store may send multi-statement requests: its table passed its
// check, and the server is not one that refuses them (see ErrMultiStatementRefused).
func (s *MultiStatementStore) before(ctx context.Context, mode string) error {
	if err := s.store.guardTable(ctx); err != nil {
		return err
	}
	return s.refuse(ctx, mode)
}

// commitInRequest commits a transaction that MultiStatementStore.Claim began: the queued
// statements and the record, if any, go with COMMIT as one request; without them COMMIT
// goes alone.
func (t *sqlTx) commitInRequest(ctx context.Context, statements []queuedStatement) error {
	if len(statements) == 0 {
		return sqlEnded(t.tx.Commit())
	}
	var request strings.Builder
	var args []any
	for _, q := range statements {
		if request.Len() > 0 {
			request.WriteString("; ")
		}
		request.WriteString(trimStatement(q.sql))
		args = append(args, q.args...)
	}
	args = append(args, endsInCommit{})
	if _, err := t.tx.ExecContext(ctx, request.String(), args...); err != nil {
		// The request stops at the statement that failed: unless that was COMMIT, the
		// transaction is open, and ROLLBACK ends it (after a failed COMMIT it does nothing).
		err = sqlEnded(fmt.Errorf("sqlinbox: commit request: %w", err))
		if rbErr := t.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
		}
		return err
	}
	return sqlEnded(t.tx.Commit()) // sends nothing: the request committed
}

// trimStatement drops a trailing ";", which would add an empty statement to a
// multi-statement request, and the database refuses one.
func trimStatement(statement string) string { return strings.TrimRight(statement, "; \t\r\n") }

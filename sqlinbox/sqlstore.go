package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	inbox "github.com/inboxkit/watermill-inbox"
)

// SQLStore is an inbox.Store on any database/sql driver whose SQL is one of the dialects
// (PostgreSQL through pgx's stdlib, MySQL/MariaDB through go-sql-driver/mysql, SQLite through
// modernc.org/sqlite). Handlers get a *sql.Tx from inbox.TxFromContext[*sql.Tx].
type SQLStore struct {
	db      *sql.DB
	dialect Dialect
	sql     statements
}

var _ inbox.Store = (*SQLStore)(nil)

// New returns a store that claims messages in table config.Table of db, in dialect.
func New(db *sql.DB, dialect Dialect, config Config) (*SQLStore, error) {
	if db == nil {
		return nil, errors.New("sqlinbox: New: db is nil")
	}
	sql, err := newStatements(dialect, config)
	if err != nil {
		return nil, err
	}
	return &SQLStore{db: db, dialect: dialect, sql: sql}, nil
}

// Dialect returns the dialect the store was built with.
func (s *SQLStore) Dialect() Dialect { return s.dialect }

// InitializeSchema creates the inbox table if it does not exist. It is safe to call on every
// start, from every instance at once.
func (s *SQLStore) InitializeSchema(ctx context.Context) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlinbox: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if s.sql.schemaLock != "" {
		if _, err := tx.ExecContext(ctx, s.sql.schemaLock); err != nil {
			return fmt.Errorf("sqlinbox: lock for schema: %w", err)
		}
	}
	for _, statement := range s.sql.schema {
		if _, err := tx.ExecContext(ctx, statement); err != nil {
			return fmt.Errorf("sqlinbox: create inbox table: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlinbox: commit schema: %w", err)
	}
	return nil
}

// Claim implements inbox.Store.
func (s *SQLStore) Claim(ctx context.Context, claim inbox.Claim) (inbox.Tx, *inbox.Processed, error) {
	txCtx, detach := detachedAfterClaim(ctx)
	tx, err := s.db.BeginTx(txCtx, nil)
	if err != nil {
		detach()
		return nil, nil, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	inserted, prior, err := s.claimIn(ctx, tx, claim)
	detach()
	if err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
		}
		return nil, nil, err
	}
	if inserted {
		return &sqlTx{tx: tx, store: s, claim: claim}, nil, nil
	}
	if err := tx.Rollback(); err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: end transaction of a duplicate: %w", err)
	}
	return nil, prior, nil
}

func (s *SQLStore) claimIn(ctx context.Context, tx *sql.Tx, claim inbox.Claim) (inserted bool, prior *inbox.Processed, err error) {
	if s.sql.lockTimeout != "" {
		if _, err := tx.ExecContext(ctx, s.sql.lockTimeout, s.sql.lockTimeoutArgs...); err != nil {
			return false, nil, fmt.Errorf("sqlinbox: set lock timeout: %w", err)
		}
	}
	if s.sql.claimOrRead != "" {
		var read inbox.Processed
		err := tx.QueryRowContext(ctx, s.sql.claimOrRead, claim.Consumer, claim.Key, claim.Fingerprint).
			Scan(&inserted, &read.Fingerprint, &read.Produced)
		switch {
		case err == nil && inserted:
			return true, nil, nil
		case err == nil:
			return false, &read, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, nil, fmt.Errorf("sqlinbox: claim: %w", err)
		}
		// Committed while the claim waited for it: invisible to the claim's snapshot.
		prior, err = scanPrior(tx.QueryRowContext(ctx, s.sql.prior, claim.Consumer, claim.Key))
		return false, prior, err
	}
	result, err := tx.ExecContext(ctx, s.sql.claim, claim.Consumer, claim.Key, claim.Fingerprint)
	if err != nil {
		return false, nil, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	n, err := result.RowsAffected()
	if err != nil {
		return false, nil, fmt.Errorf("sqlinbox: claim: rows affected: %w", err)
	}
	if n == 1 {
		return true, nil, nil
	}
	prior, err = scanPrior(tx.QueryRowContext(ctx, s.sql.prior, claim.Consumer, claim.Key))
	return false, prior, err
}

// sqlTx adapts a *sql.Tx to inbox.Tx. database/sql ends a transaction with the context it
// began with, so Rollback takes none.
type sqlTx struct {
	tx    *sql.Tx
	store *SQLStore
	claim inbox.Claim
	statementQueue
}

var _ inbox.StatementQueuer = (*sqlTx)(nil)

func (t *sqlTx) Driver() any { return t.tx }

// Commit runs the queued statements and the record of produced messages, then commits.
// database/sql cannot pipeline them: each is a round trip.
func (t *sqlTx) Commit(ctx context.Context, produced []byte) error {
	statements := t.take()
	if produced != nil {
		statements = append(statements, queuedStatement{t.store.sql.record, []any{produced, t.claim.Consumer, t.claim.Key}})
	}
	for _, q := range statements {
		if _, err := t.tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			err = sqlEnded(fmt.Errorf("sqlinbox: before commit: %w", err))
			if rbErr := t.tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
				err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
			}
			return err
		}
	}
	return sqlEnded(t.tx.Commit())
}

func (t *sqlTx) Rollback(context.Context) error { return sqlEnded(t.tx.Rollback()) }

// sqlEnded marks the error of a transaction the handler already committed or rolled back.
func sqlEnded(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", inbox.ErrTxEndedByHandler, err)
	}
	return err
}

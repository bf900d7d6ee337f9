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
	if _, err := tx.ExecContext(ctx, s.sql.schema); err != nil {
		return fmt.Errorf("sqlinbox: create inbox table: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlinbox: commit schema: %w", err)
	}
	return nil
}

// Claim implements inbox.Store.
func (s *SQLStore) Claim(ctx context.Context, consumer, key string) (inbox.Tx, bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, fmt.Errorf("sqlinbox: begin: %w", err)
	}
	inserted, err := claimIn(ctx, tx, s.sql.claim, consumer, key)
	if err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("sqlinbox: rollback: %w", rbErr))
		}
		return nil, false, err
	}
	if inserted == 0 {
		if err := tx.Rollback(); err != nil {
			return nil, false, fmt.Errorf("sqlinbox: end transaction of a duplicate: %w", err)
		}
		return nil, false, nil
	}
	return sqlTx{tx}, true, nil
}

func claimIn(ctx context.Context, tx *sql.Tx, claim, consumer, key string) (int64, error) {
	result, err := tx.ExecContext(ctx, claim, consumer, key)
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: claim: %w", err)
	}
	inserted, err := result.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlinbox: claim: rows affected: %w", err)
	}
	return inserted, nil
}

// sqlTx adapts a *sql.Tx to inbox.Tx. database/sql ends a transaction with the context it
// began with, so Commit and Rollback take none.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Driver() any                    { return t.tx }
func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

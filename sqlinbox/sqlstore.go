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
// modernc.org/sqlite). Handlers get a *sql.Tx from inbox.TxFromContext[*sql.Tx], or, with
// Config.Begin, the transaction their data layer began over it (inbox.TxFromContext[*sqlx.Tx]).
type SQLStore struct {
	db    *sql.DB
	sql   statements
	guard *tableGuard // checks the table before the first claim
	begin Begin       // Config.Begin, or db.BeginTx
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
	begin := config.Begin
	if begin == nil {
		begin = beginStd(db)
	}
	return &SQLStore{db: db, sql: sql, guard: newTableGuard(config.Logger), begin: begin}, nil
}

// InitializeSchema creates the inbox table if it does not exist, then checks it (see
// CheckTable): a table found in a shape that cannot guard is an error wrapping
// ErrTableMismatch. It is safe to call on every start, from every instance at once.
func (s *SQLStore) InitializeSchema(ctx context.Context) error {
	return afterSchema(ctx, s.createSchema(ctx), s.CheckTable)
}

func (s *SQLStore) createSchema(ctx context.Context) (err error) {
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
	if err := s.guardTable(ctx); err != nil {
		return nil, nil, err
	}
	txCtx, detach := detachedAfterClaim(ctx)
	handle, tx, err := s.begin(txCtx, nil)
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
		return &sqlTx{tx: tx, handle: handle, store: s, claim: claim}, nil, nil
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
	if s.sql.insertOrSkip != "" {
		err := tx.QueryRowContext(ctx, s.sql.insertOrSkip, claim.Consumer, claim.Key, claim.Fingerprint).Scan(&inserted)
		switch {
		case err == nil:
			return true, nil, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, nil, fmt.Errorf("sqlinbox: claim: %w", err)
		}
		// A duplicate. Under READ COMMITTED, Prior takes a snapshot of its own, so it also
		// sees a claim committed while this one waited for it; under REPEATABLE READ or
		// SERIALIZABLE such a claim fails instead ("could not serialize access"), and the
		// redelivery is the duplicate.
		prior, err = scanPrior(tx.QueryRowContext(ctx, s.sql.prior, claim.Consumer, claim.Key))
		return false, prior, err
	}
	// The claim reads no affected-row count, which driver settings can change (MySQL's
	// clientFoundRows): a duplicate is the dialect's duplicate-key error.
	if _, err := tx.ExecContext(ctx, s.sql.insert, claim.Consumer, claim.Key, claim.Fingerprint); err != nil {
		if !s.guard.isDuplicateKey(s.sql, err) {
			return false, nil, fmt.Errorf("sqlinbox: claim: %w", err)
		}
		prior, err = scanPrior(tx.QueryRowContext(ctx, s.sql.prior, claim.Consumer, claim.Key))
		return false, prior, err
	}
	return true, nil, nil
}

// TableSize returns the bytes the inbox table and its indexes take, as the dialect measures
// them, and a note on what was measured.
func (s *SQLStore) TableSize(ctx context.Context) (bytes int64, note string, err error) {
	if s.sql.dialect.tableSize == nil {
		return 0, "", fmt.Errorf("sqlinbox: dialect %q cannot measure a table", s.sql.dialect.Name)
	}
	for _, q := range s.sql.dialect.tableSize(s.sql.table) {
		var size sql.NullInt64
		err = s.db.QueryRowContext(ctx, render(q.SQL, s.sql.table), q.Args...).Scan(&size)
		bytes, note = size.Int64, q.Note
		if err == nil && size.Valid {
			break
		}
	}
	if err != nil {
		return 0, "", fmt.Errorf("sqlinbox: table size: %w", err)
	}
	return bytes, note, nil
}

package sqlinbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Store is an [inbox.Store] on an inbox table of PostgreSQL, [MySQL]/MariaDB or [SQLite], whose
// primary key (consumer, message_id) is the only duplicate check. [NewPgx], [NewDB] and
// [NewMultiStatement] build one; they differ only in how a message's statements travel to the
// database:
//
//   - NewPgx, on a pgx pool: in pipelined batches. BEGIN travels with the claim, and the
//     statements queued with inbox.ExecAtCommit, the record of produced messages and COMMIT travel
//     together; write-behind mode (inbox.Config.WriteBehind) sends everything in one batch.
//     Handlers get a pgx.Tx.
//   - NewDB, on a database/sql pool: one statement at a time. Handlers get a *sql.Tx, or the
//     transaction their data layer began over it (Config.Begin).
//   - NewMultiStatement, on MySQL or MariaDB: as multi-statement requests, several statements
//     in one request. Handlers get a *sql.Tx.
//
// Every [Store] claims, commits, checks its table, creates it and cleans it up the same way.
// Before its first claim it reads the table's shape from the catalog and refuses a table that
// cannot guard against duplicates ([ErrTableMismatch]; see CheckTable). The table's column
// names are fixed, whatever the dialect (see [Dialect]).
//
// A Store has the optional method the middleware asks a store for, IsTransient(err error)
// bool, which tells the infrastructure's failures from the message's (see [Store.IsTransient]
// and inbox.Poisonous).
type Store struct {
	pool    pool
	sql     statements
	table   *tableGuard
	refusal *verdict // NewMultiStatement's check of the server; nil for the other stores
	logger  watermill.LoggerAdapter

	markQueue markQueue
}

var (
	_ inbox.Store            = (*Store)(nil)
	_ inbox.WriteBehindStore = (*Store)(nil)
)

func newStore(p pool, dialect Dialect, config Config) (*Store, error) {
	sql, err := newStatements(dialect, config)
	if err != nil {
		return nil, err
	}
	logger := config.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	s := &Store{pool: p, sql: sql, table: newTableGuard(config.Logger, sql.table), logger: logger}
	s.markQueue.full = make(chan struct{}, 1)
	s.markQueue.idle = sync.NewCond(&s.markQueue.mu)
	return s, nil
}

// Table returns the inbox table, as the store's statements name it, with the name of its
// primary key ([Table.PrimaryKey]) once a table check has passed (see CheckTable).
func (s *Store) Table() Table { return s.table.withKey(s.sql.table) }

// InitializeSchema creates the inbox table and its index if they do not exist, in one
// transaction (see [Dialect.CreateTable]), then checks the table (see CheckTable): a table found
// in a shape that cannot guard is an error wrapping [ErrTableMismatch]. It is safe to call on
// every start, from every instance at once. It needs the CREATE privilege.
func (s *Store) InitializeSchema(ctx context.Context) error {
	createErr := s.pool.inTx(ctx, true, func(q querier) error {
		if s.sql.schemaLock != "" {
			if _, err := q.exec(ctx, s.sql.schemaLock); err != nil {
				return fmt.Errorf("sqlinbox: lock for schema: %w", err)
			}
		}
		for _, statement := range s.sql.schema {
			if _, err := q.exec(ctx, statement); err != nil {
				return fmt.Errorf("sqlinbox: create inbox table: %w", err)
			}
		}
		return nil
	})
	// A table of the wrong shape explains a failed statement (CREATE INDEX on a table
	// without processed_at), so its refusal comes first; a table still missing is explained
	// by the failed CREATE (a role that may not create it, say).
	checkErr := s.CheckTable(ctx)
	var missing missingTableError
	if createErr != nil && (!isTableMismatch(checkErr) || errors.As(checkErr, &missing)) {
		return createErr
	}
	return checkErr
}

// marks reports whether the store keeps the unpublished marks: its dialect has them and its
// last passing table check found the column (see [RelaySQL]).
func (s *Store) marks() bool { return s.table.unpublished.Load() }

// claimRead is the read of claim's committed row after a duplicate.
func (s *Store) claimRead(claim inbox.Claim) claimRead {
	marks := s.marks()
	return claimRead{sql: s.sql.selectClaimSQL(marks), args: s.sql.selectClaimArgs(claim), marks: marks}
}

// selectClaimSQL is the text claimRead sends now, which the pgx stores prepare.
func (s *Store) selectClaimSQL() string { return s.sql.selectClaimSQL(s.marks()) }

// priorRead is the record of a duplicate of claim as read, published also when a mark of it
// waits in this store to be written.
func (s *Store) priorRead(claim inbox.Claim, prior *inbox.Record) *inbox.Record {
	if prior != nil && !prior.Published && s.markQueue.unwrittenMark(claim) {
		prior.Published = true
	}
	return prior
}

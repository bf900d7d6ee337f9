package sqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// tableRecheckInterval is how long a store refuses messages on the verdict of a failed check
// before it checks the table again, so that a table fixed while the process runs is used
// without a restart, and a refused table costs no catalog query per message.
const tableRecheckInterval = 10 * time.Second

// tableGuard runs a store's table check before its first claim and keeps the verdict. A
// table that passed is not checked again (an atomic load per message); a refused table is
// checked again at most every tableRecheckInterval; a check that could not read the catalog
// (the database is down) gives no verdict and is repeated by the next message.
//
// A check that passes also keeps the name of the table's primary key, which the store's
// duplicate-key recognition compares with the constraint a failed claim names.
type tableGuard struct {
	passed     atomic.Bool
	primaryKey atomic.Pointer[string]
	logger     watermill.LoggerAdapter
	now        func() time.Time

	mu        sync.Mutex // one check at a time; held by the messages that wait for it
	refused   error      // the last check's ErrTableMismatch, if any
	checkedAt time.Time
}

func newTableGuard(logger watermill.LoggerAdapter) *tableGuard {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &tableGuard{logger: logger, now: time.Now}
}

// tableCheck reads the table's shape, judges it and returns its primary key's name.
type tableCheck func(context.Context) (primaryKey string, err error)

// before returns nil once the table passed its check, running the check if no verdict
// stands, and the refusal while one does.
func (g *tableGuard) before(ctx context.Context, table Table, check tableCheck) error {
	if g.passed.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.passed.Load() {
		return nil
	}
	if g.refused != nil && g.now().Sub(g.checkedAt) < tableRecheckInterval {
		return g.refused
	}
	return g.checkLocked(ctx, table, check)
}

// check runs check now, whatever the standing verdict, and keeps its verdict.
func (g *tableGuard) check(ctx context.Context, table Table, check tableCheck) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.checkLocked(ctx, table, check)
}

func (g *tableGuard) checkLocked(ctx context.Context, table Table, check tableCheck) error {
	primaryKey, err := check(ctx)
	switch {
	case err == nil:
		g.refused = nil
		g.primaryKey.Store(&primaryKey)
		g.passed.Store(true)
	case errors.Is(err, ErrTableMismatch):
		g.passed.Store(false)
		g.refused, g.checkedAt = err, g.now()
		g.logger.Error("Inbox table refused: every message fails until it is fixed", err,
			watermill.LogFields{"table": table.Quoted})
	}
	return err
}

// isDuplicateKey reports whether err, from the claim's insert of sql, is the duplicate key: a
// violation of the primary key the table check found.
func (g *tableGuard) isDuplicateKey(sql statements, err error) bool {
	return sql.dialect.IsDuplicateKey(err, g.table(sql.table))
}

// table returns t with the name of its primary key that the last passing check read.
func (g *tableGuard) table(t Table) Table {
	if key := g.primaryKey.Load(); key != nil {
		t.PrimaryKey = *key
	}
	return t
}

// describeTable reads table's shape with dialect's TableCheck through query, judges it and
// returns the primary key's name.
func describeTable(ctx context.Context, dialect Dialect, table Table,
	query func(ctx context.Context, sql string, args ...any) (tableRows, error),
) (primaryKey string, err error) {
	check := dialect.TableCheck
	text, args := check.Describe(table)
	rows, err := query(ctx, text, args...)
	if err != nil {
		return "", fmt.Errorf("sqlinbox: read the inbox table's shape: %w", err)
	}
	defer rows.Close()
	var columns []TableColumn
	for rows.Next() {
		var c TableColumn
		var exact, binary, temporal, nullable, hasDefault int64
		if err := rows.Scan(&c.Name, &c.Type, &c.KeyPosition, &exact, &binary, &temporal, &nullable, &hasDefault, &c.PrimaryKey); err != nil {
			return "", fmt.Errorf("sqlinbox: read the inbox table's shape: %w", err)
		}
		c.Exact, c.Binary, c.Temporal, c.Nullable, c.HasDefault = exact == 1, binary == 1, temporal == 1, nullable == 1, hasDefault == 1
		columns = append(columns, c)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("sqlinbox: read the inbox table's shape: %w", err)
	}
	if err := judgeTable(dialect, table, columns); err != nil {
		return "", err
	}
	return columns[0].PrimaryKey, nil
}

// tableRows is what describeTable reads: *sql.Rows, or pgx.Rows with an adapted Close.
type tableRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// afterSchema is InitializeSchema's verdict: the table it created or found must pass the
// check. A mismatch explains a failed statement too (CREATE INDEX on a table without
// processed_at), so it comes first.
func afterSchema(ctx context.Context, schemaErr error, check func(context.Context) error) error {
	err := check(ctx)
	switch {
	case errors.Is(err, ErrTableMismatch):
		return err
	case schemaErr != nil:
		return schemaErr
	}
	return err
}

var _ tableRows = (*sql.Rows)(nil)

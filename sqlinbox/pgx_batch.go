package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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

package sqlinbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// maxNamedStatements bounds the queued statement texts a connection prepares by name, so a
// handler that builds its SQL text from data cannot fill the server's memory.
const maxNamedStatements = 256

// prepare prepares on c, by name, the store's own texts among statements, the texts also,
// and the first maxNamedStatements distinct texts of queued statements, where they are not
// prepared yet. pgx's Prepare with name == sql makes the text itself name the statement, and
// returns at once for a text already prepared on the connection. pgx forgets the cached
// statements of a batch that fails, which would make the batch after every write-behind
// duplicate prepare them again; named statements are kept. Every batch that can fail
// prepares its texts so, so that no text is both named and in pgx's cache.
//
// In a mode that keeps no statement on the server it does nothing: pgx sends each text with
// its parameters (exec, describe-exec) or as a simple query, and a transaction pooler may
// run the next transaction on a server connection that never saw the name.
func (p *pgxPool) prepare(ctx context.Context, c *pgx.Conn, statements []statement, also ...string) error {
	if !p.named {
		return nil
	}
	for _, text := range also {
		if _, err := c.Prepare(ctx, text, text); err != nil {
			return fmt.Errorf("sqlinbox: prepare: %w", err)
		}
	}
	for _, st := range statements {
		if st.kind == kindQueued && !p.namedStatement(st.sql) {
			continue
		}
		if _, err := c.Prepare(ctx, st.sql, st.sql); err != nil {
			return fmt.Errorf("sqlinbox: prepare: %w", err)
		}
	}
	return nil
}

// namedStatement reports whether text is one of the first maxNamedStatements queued texts.
func (p *pgxPool) namedStatement(text string) bool {
	if _, ok := p.prepared.Load(text); ok {
		return true
	}
	if p.preparedCount.Add(1) > maxNamedStatements {
		p.preparedCount.Add(-1)
		return false
	}
	if _, loaded := p.prepared.LoadOrStore(text, struct{}{}); loaded {
		p.preparedCount.Add(-1)
	}
	return true
}

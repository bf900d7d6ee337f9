package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// One pipeline on one connection: every request's statements, each request followed by a
// Sync, flushed with one write; then the results in order. Between two Syncs PostgreSQL runs
// the statements in one implicit transaction, committed at the Sync; an error skips the
// rest of them up to the Sync and rolls back only that transaction.

// encoded is one statement ready for a pipeline: prepared by name (sd set) or sent with its
// text, its parameters encoded by the connection's type map.
type encoded struct {
	sd    *pgconn.StatementDescription
	sql   string
	eqb   pgx.ExtendedQueryBuilder
	found *bool
}

// send sends requests in one pipeline on conn and sets each one's result.
func (p *pipelinePool) send(ctx context.Context, conn *pgxpool.Conn, requests []*pipelineRequest) {
	c := conn.Conn()
	sent := make([]*pipelineRequest, 0, len(requests))
	statements := make([][]encoded, 0, len(requests))
	for i, r := range requests {
		enc, failed, err := p.encode(ctx, c, r.statements)
		if err == nil {
			sent = append(sent, r)
			statements = append(statements, enc)
			continue
		}
		r.failed, r.err = failed, err
		if c.IsClosed() {
			r.err = lostPipeline(err)
			for _, later := range requests[i+1:] {
				later.failed, later.err = failedSetup, lostPipeline(err)
			}
			for _, r := range sent {
				r.failed, r.err = failedSetup, lostPipeline(err)
			}
			return
		}
	}
	if len(sent) == 0 {
		return
	}
	p.perPipeline.Record(ctx, int64(len(sent)), p.tableAttr)
	pl := c.PgConn().StartPipeline(ctx)
	for _, enc := range statements {
		for i := range enc {
			e := &enc[i]
			if e.sd != nil {
				// Not SendQueryStatement: pgx 5.13 keeps a queue of its descriptions that a
				// failed statement's skipped successors do not leave, and the next message's
				// results are then read with the wrong ones.
				pl.SendQueryPrepared(e.sd.Name, e.eqb.ParamValues, e.eqb.ParamFormats, e.eqb.ResultFormats)
			} else {
				pl.SendQueryParams(e.sql, e.eqb.ParamValues, nil, e.eqb.ParamFormats, e.eqb.ResultFormats)
			}
		}
		pl.SendPipelineSync()
	}
	err := pl.Flush()
	for i, r := range sent {
		if err == nil {
			err = readRequest(pl, c.TypeMap(), r, statements[i])
			continue
		}
		// The connection broke before this request's result arrived: it committed or
		// not, which its redelivery finds out.
		r.failed, r.err = failedUnknown, lostPipeline(err)
	}
	_ = pl.Close() // a broken connection is closed already, and the pool discards it
}

// encode prepares (in the modes that name statements) and encodes statements on c. It
// returns the index of the one that failed with its error.
func (p *pipelinePool) encode(ctx context.Context, c *pgx.Conn, statements []statement) ([]encoded, int, error) {
	out := make([]encoded, len(statements))
	for i, st := range statements {
		text, args := st.sql, st.args
		for len(args) > 0 {
			rewriter, ok := args[0].(pgx.QueryRewriter)
			if !ok {
				break
			}
			var err error
			if text, args, err = rewriter.RewriteQuery(ctx, c, text, args[1:]); err != nil {
				return nil, i, fmt.Errorf("sqlinbox: rewrite the statement: %w", err)
			}
		}
		e := &out[i]
		e.sql, e.found = text, st.found
		if p.named && (st.kind != kindQueued || p.namedStatement(text)) {
			sd, err := c.Prepare(ctx, text, text)
			if err != nil {
				return nil, i, fmt.Errorf("sqlinbox: prepare: %w", err)
			}
			e.sd = sd
		}
		if err := e.eqb.Build(c.TypeMap(), e.sd, args); err != nil {
			return nil, i, fmt.Errorf("sqlinbox: encode the arguments: %w", err)
		}
	}
	return out, 0, nil
}

// readRequest reads the results of r's statements and of its Sync, and sets r's result.
// It returns an error when the connection broke, after which nothing more can be read.
func readRequest(pl *pgconn.Pipeline, m *pgtype.Map, r *pipelineRequest, statements []encoded) error {
	for i := range statements {
		res, err := pl.GetResults()
		var failed error
		if err == nil {
			failed, err = readStatement(res, m, &statements[i], r.row)
		} else if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
			failed, err = err, nil
		}
		switch {
		case err != nil:
			r.failed, r.err = i, lostPipeline(err)
			return err
		case failed != nil:
			// The server skips the rest up to the Sync and rolls the transaction back.
			r.failed, r.err = i, failed
			return skipToSync(pl)
		}
	}
	// The Sync: the implicit transaction's COMMIT, whose deferred checks may fail.
	res, err := pl.GetResults()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		r.failed, r.err = len(statements), err
		return skipToSync(pl)
	case err != nil:
		r.failed, r.err = len(statements), lostPipeline(err)
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		err := fmt.Errorf("sqlinbox: pipeline: %T where its Sync was expected", res)
		r.failed, r.err = len(statements), lostPipeline(err)
		return err
	}
	r.failed, r.err = 0, nil
	return nil
}

// readStatement reads one statement's result: whether it returned a row (found), and the
// read of a committed claim's row (row). failed is the statement's error; broken, the
// connection's, after which nothing more can be read.
func readStatement(res any, m *pgtype.Map, e *encoded, row *claimRow) (failed, broken error) {
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, fmt.Errorf("sqlinbox: pipeline: %T where a statement's result was expected", res)
	}
	gotRow := rr.NextRow()
	if gotRow && row != nil {
		failed = row.decode(m, rr.FieldDescriptions(), rr.Values())
	}
	for rr.NextRow() {
	}
	if _, err := rr.Close(); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return nil, err
		}
		return err, nil
	}
	if e.found != nil {
		*e.found = gotRow
	}
	return failed, nil
}

// skipToSync reads past what is left of a failed request, up to and including its Sync.
func skipToSync(pl *pgconn.Pipeline) error {
	for {
		res, err := pl.GetResults()
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			continue
		case err != nil:
			return err
		case res == nil:
			return errors.New("sqlinbox: pipeline: no Sync after a failed statement")
		}
		switch res := res.(type) {
		case *pgconn.PipelineSync:
			return nil
		case *pgconn.ResultReader:
			_, _ = res.Close()
		}
	}
}

// lostPipeline is the error of a message whose result did not arrive because the
// connection broke: a failure of the store's, not of the message.
func lostPipeline(err error) error {
	return &storeError{fmt.Errorf("sqlinbox: pipeline: the connection broke before the message's result arrived: %w", err)}
}

// claimRow is the row of a committed claim that a pipeline read, its columns as bytes.
type claimRow struct {
	found   bool
	columns [][]byte
}

func (r *claimRow) decode(m *pgtype.Map, fields []pgconn.FieldDescription, values [][]byte) error {
	r.found, r.columns = true, make([][]byte, len(values))
	for i, v := range values {
		if err := m.Scan(fields[i].DataTypeOID, fields[i].Format, v, &r.columns[i]); err != nil {
			return fmt.Errorf("sqlinbox: read the committed claim's column %s: %w", fields[i].Name, err)
		}
	}
	return nil
}

// Scan gives the columns to scanClaim, which reads them into *[]byte.
func (r *claimRow) Scan(dest ...any) error {
	if !r.found {
		return pgx.ErrNoRows
	}
	if len(dest) != len(r.columns) {
		return fmt.Errorf("sqlinbox: %d columns read, %d wanted", len(r.columns), len(dest))
	}
	for i, d := range dest {
		b, ok := d.(*[]byte)
		if !ok {
			return fmt.Errorf("sqlinbox: column %d scanned into %T", i, d)
		}
		*b = r.columns[i]
	}
	return nil
}

package sqlinbox

import (
	"context"
	"fmt"
	"time"

	inbox "github.com/inboxkit/watermill-inbox"
)

// A request larger than the server accepts ([MySQL]'s max_allowed_packet) fails with an error
// that does not say so: the server closes the connection, and the driver reports "connection
// reset by peer", "invalid connection", error 1153 or 1105, or refuses to interpolate the
// parameters. The store explains such a failure after the fact, asking the server for its
// limit only then: a request that succeeds costs nothing.

// explainSizeFrom is the smallest request whose failure the store explains: smaller ones fit
// every server ([MySQL]'s smallest max_allowed_packet is 1 KiB, but nobody runs one that small
// and an outage should not cost a query per failed message).
const explainSizeFrom = 64 << 10

// limitLookup bounds the query of the server's limit, which runs after a failure, perhaps
// during an outage.
const limitLookup = 2 * time.Second

// requestSize is about the bytes that statements take in one request: their text and their
// string and binary arguments (the inbox's own already hex-encoded on [MySQL]; see Param).
func requestSize(statements []statement) int64 {
	var n int64
	for _, st := range statements {
		n += int64(len(st.sql)) + 2
		for _, a := range st.args {
			switch v := a.(type) {
			case string:
				n += int64(len(v)) + 2
			case []byte:
				n += int64(len(v)) + 2
			default:
				n += 8
			}
		}
	}
	return n
}

// explainSize returns err, or, for a failed request of statements larger than the server's
// limit, an error that says so and wraps [inbox.ErrRecordTooLarge] (the same record fails the
// same way on every delivery: the message's failure, not the infrastructure's) and err.
func (s *Store) explainSize(ctx context.Context, statements []statement, err error) error {
	query := s.sql.dialect.RequestLimit()
	size := requestSize(statements)
	if query == "" || size < explainSizeFrom {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limitLookup)
	defer cancel()
	limit, lookupErr := s.pool.queryInt(ctx, query)
	if lookupErr != nil || !limit.Valid || size < limit.Int64 {
		return err
	}
	var record int
	for _, st := range statements {
		if st.kind == kindRecord && len(st.args) > 0 {
			switch v := st.args[0].(type) {
			case string:
				record = len(v) / 2 // hex-encoded
			case []byte:
				record = len(v)
			}
		}
	}
	return fmt.Errorf("%w: sqlinbox: the request of about %d bytes (a record of %d bytes, sent hex-encoded, and %d statement(s)) "+
		"is larger than the server's max_allowed_packet of %d bytes, which refuses it: set inbox.Config.MaxRecorded to at most "+
		"%d, or raise max_allowed_packet on the server (docs/mysql.md); the driver reported: %w",
		inbox.ErrRecordTooLarge, size, record, len(statements), limit.Int64, max(0, limit.Int64/2-explainSizeFrom), err)
}

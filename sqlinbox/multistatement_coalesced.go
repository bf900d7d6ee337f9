package sqlinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"runtime"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxotel"
)

// NewMultiStatementCoalesced returns a store like [NewMultiStatement]'s, and its pool, whose
// write-behind mode ([inbox.Config.WriteBehind]) sends the requests of messages in flight at
// the same time together: one multi-statement request on one connection that holds, for each
// message, START TRANSACTION, the lock timeout, the claim, its queued statements, its record
// and COMMIT. Each message is still its own transaction with its own result, handed to its own
// delivery, whose ack waits for it.
//
// The server runs such a request in order and stops at the first statement that fails. The
// messages before it committed and are acked on their results; the message it belongs to fails
// alone (its transaction is rolled back, and it is nacked, or acked without effect if its
// claim met a committed copy: a duplicate, whether that copy was earlier in the same request
// or on another connection); the messages after it never ran, and go again in the next
// request on the same connection. The store tells where the request stopped by a user
// variable it sets after each COMMIT, @sqlinbox_done, read with the ROLLBACK that follows a
// failure: the connection's, which handlers must not set. A connection lost before the
// request's result arrived fails its messages (IsTransient reports it): each committed or not,
// which the redelivery finds out.
//
// Coalescing waits for nothing, as [NewPgxPipeline]'s: a delivery that finds a connection free
// ([PipelineConfig.Connections]) sends at once with whatever deliveries wait at that moment, so
// a lone delivery costs one round trip, as on [NewMultiStatement]; deliveries that arrive while
// every such connection is busy go together, up to [PipelineConfig.Messages] and about 64 KiB
// of text, which every server's max_allowed_packet admits. A message larger than that goes
// alone, where the store explains a request larger than max_allowed_packet as on
// NewMultiStatement (inbox.ErrRecordTooLarge), and so does one with a queued statement the
// store cannot tell is one statement without the server's count of what ran, which a request
// that stops early does not give: a text with a ";", an executable comment (/*! */), or a quote
// or comment that is open at its end read with or without backslash escapes; or one whose "?"
// are not exactly its arguments. Alone, such a message keeps every check of NewMultiStatement,
// the count of statements the server ran among them.
//
// Every refusal of [NewMultiStatement] holds: a node of a Galera or Percona XtraDB Cluster
// ([ErrMultiStatementRefused]), a connection in a character set in which client-side escaping
// is unsafe, a queued statement that ends the transaction or changes the session's character
// set or sql_mode. connector and dialect are as for NewMultiStatement; the claim-first mode
// runs as on it, one connection per message. Handlers must only queue their writes
// ([inbox.ExecAtCommit]), as write-behind mode requires. pipeline is as for NewPgxPipeline,
// but that Connections defaults to the larger of 4 and the number of CPUs (pgxpool's default
// MaxConns), and should not exceed the pool's SetMaxOpenConns, if set. MySQL and MariaDB only.
func NewMultiStatementCoalesced(connector driver.Connector, dialect Dialect, config Config, pipeline PipelineConfig) (*Store, *sql.DB, error) {
	if pipeline.Connections < 0 || pipeline.Messages < 0 {
		return nil, nil, fmt.Errorf("sqlinbox: NewMultiStatementCoalesced: negative PipelineConfig %+v", pipeline)
	}
	if pipeline.Connections == 0 {
		pipeline.Connections = max(4, runtime.NumCPU())
	}
	if pipeline.Messages == 0 {
		pipeline.Messages = defaultPipelineMessages
	}
	perPipeline, err := pipelineHistogram(pipeline.MeterProvider)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlinbox: NewMultiStatementCoalesced: metrics: %w", err)
	}
	s, db, err := NewMultiStatement(connector, dialect, config)
	if err != nil {
		return nil, nil, err
	}
	p := &coalescedPool{multiPool: s.pool.(*multiPool), perPipeline: perPipeline,
		tableAttr: metric.WithAttributeSet(attribute.NewSet(attribute.String("table", s.sql.table.label())))}
	p.combiner = newCombiner(pipeline.Connections, pipeline.Messages, db.Conn, func(c *sql.Conn) { _ = c.Close() }, p.send)
	s.pool = p
	return s, db, nil
}

// pipelineHistogram is the inbox.pipeline.messages histogram of a store that coalesces.
func pipelineHistogram(provider metric.MeterProvider) (metric.Int64Histogram, error) {
	if provider == nil {
		provider = otel.GetMeterProvider()
	}
	return provider.Meter(inboxotel.ScopeName).Int64Histogram(inboxotel.MetricPipelineMessages,
		metric.WithDescription("Requests carried by each pipeline of a store made by NewPgxPipeline or NewMultiStatementCoalesced"),
		metric.WithUnit("{message}"), metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128))
}

// coalescedPool is [NewMultiStatement]'s pool whose write-behind sessions go through a combiner.
type coalescedPool struct {
	*multiPool
	combiner *combiner[*sql.Conn]

	perPipeline metric.Int64Histogram // inbox.pipeline.messages
	tableAttr   metric.RecordOption
}

// session returns a session that holds nothing yet: the claim-first mode takes its connection
// at begin, write-behind mode hands its statements to the combiner.
func (p *coalescedPool) session(context.Context) (session, error) {
	return &coalescedSession{pool: p}, nil
}

// coalescedSession is one message on a store made by [NewMultiStatementCoalesced]: in the
// claim-first mode a multiSession on a connection of its own, in write-behind mode a request to
// the combiner.
type coalescedSession struct {
	pool  *coalescedPool
	inner *multiSession // set by begin
}

func (s *coalescedSession) begin(ctx context.Context, first []statement) (int, error) {
	sess, err := s.pool.multiPool.session(ctx)
	if err != nil {
		return failedSetup, fmt.Errorf("sqlinbox: acquire a connection: %w", err)
	}
	s.inner = sess.(*multiSession)
	return s.inner.begin(ctx, first)
}

func (s *coalescedSession) handle() any { return s.inner.handle() }

func (s *coalescedSession) commit(ctx context.Context, statements []statement) (int, error) {
	return s.inner.commit(ctx, statements)
}

func (s *coalescedSession) rollback(ctx context.Context) error { return s.inner.rollback(ctx) }

// run sends the message's statements in the next request and waits for their result.
func (s *coalescedSession) run(ctx context.Context, statements []statement) (int, error) {
	r := newRequest(ctx, statements, nil)
	s.pool.combiner.do(r)
	return r.failed, r.err
}

// rollbackAndSelect: in write-behind mode the lane rolled the duplicate's transaction back, so
// the read of the committed claim runs on the pool, in a transaction of its own.
func (s *coalescedSession) rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error) {
	if s.inner != nil {
		return s.inner.rollbackAndSelect(ctx, read)
	}
	return scanClaim(s.pool.db.QueryRowContext(context.WithoutCancel(ctx), read.sql, read.args...), read.marks)
}

// abort: the lane ended the transaction of a message of its request.
func (s *coalescedSession) abort(ctx context.Context, cause error) error {
	if s.inner != nil {
		return s.inner.abort(ctx, cause)
	}
	return cause
}

// queryString reads the character set after the guard refused a claim: on the session's
// connection in the claim-first mode, else on one of the pool's, whose DSN is the lanes'.
func (s *coalescedSession) queryString(ctx context.Context, query string) (v string, err error) {
	if s.inner != nil {
		return s.inner.queryString(ctx, query)
	}
	err = s.pool.db.QueryRowContext(ctx, query).Scan(&v)
	return v, err
}

// lost: a lane's lost connection is in the message's error (lostPipeline), a store error.
func (s *coalescedSession) lost() bool { return s.inner != nil && s.inner.lost() }

func (s *coalescedSession) raised(err error, transient func(error) bool) bool {
	if s.inner != nil {
		return s.inner.raised(err, transient)
	}
	return transient(err)
}

func (s *coalescedSession) release() {
	if s.inner != nil {
		s.inner.release()
	}
}

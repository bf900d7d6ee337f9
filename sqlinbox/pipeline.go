package sqlinbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	inbox "github.com/inboxkit/watermill-inbox"
)

// PipelineConfig configures how a store made by [NewPgxPipeline] pipelines the write-behind
// requests of messages in flight at the same time, and how one made by
// [NewMultiStatementCoalesced] coalesces them into multi-statement requests. The zero value is
// ready to use.
type PipelineConfig struct {
	// Connections is the most connections that send pipelines at once, each acquired from
	// the pool for one pipeline. A delivery that finds fewer busy goes at once, with the
	// deliveries waiting at that moment; one that finds them all busy waits and goes with
	// the next pipeline. It must not exceed the pool's MaxConns. Fewer make fuller
	// pipelines sooner, but each connection's messages commit one after the other, each
	// waiting for its own WAL flush, so fewer than the database can run at once lower the
	// throughput. Default: the pool's MaxConns: while a connection is free a delivery
	// costs what it costs on [NewPgx], and deliveries coalesce once every one is busy. On
	// [NewMultiStatementCoalesced], whose pool has no limit until the application sets one,
	// the default is the larger of 4 and the number of CPUs, pgxpool's default MaxConns.
	Connections int

	// Messages is the most messages one pipeline carries. Default: 16.
	Messages int

	// MeterProvider receives the inbox.pipeline.messages histogram
	// ([inboxotel.MetricPipelineMessages]): the requests each pipeline carried (on
	// [NewMultiStatementCoalesced], the messages of each multi-statement request), with the
	// attribute "table". Default: the global provider, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

const defaultPipelineMessages = 16

// NewPgxPipeline returns a store like [NewPgx]'s whose write-behind mode
// ([inbox.Config.WriteBehind]) sends the requests of messages in flight at the same time
// together: one pipeline on one connection, each message's claim, queued statements and
// record followed by a Sync of its own. Each message is still its own transaction (the
// implicit transaction PostgreSQL runs between two Syncs, without BEGIN or COMMIT): a
// statement that fails rolls back only its own message, which is nacked, and the messages
// after it in the pipeline run; each message's result is handed to its own delivery, whose
// ack waits for it. A duplicate's claim conflicts with the committed key (a copy earlier in
// the same pipeline commits before it runs; a copy on another connection makes it wait for
// that copy's transaction): its transaction rolls back, and the committed claim is read in a
// later pipeline. A connection lost before a message's result arrived fails that message
// (IsTransient reports it): its transaction committed or not, which the redelivery finds
// out.
//
// Coalescing waits for nothing: a delivery that finds a connection free (see
// [PipelineConfig.Connections]) sends at once, with whatever deliveries wait at that moment,
// so that a lone delivery costs one round trip; deliveries that arrive while every such
// connection is busy go together in the next pipeline, up to [PipelineConfig.Messages]. The
// store starts no goroutine: the delivery that finds a connection free sends the pipeline
// and hands out its results.
//
// What it buys is the throughput of a connection per delivery on fewer connections, and more
// where the round trip is long next to a message's work in the database: it needs
// [PipelineConfig.Connections] connections however many deliveries are in flight, where the
// other stores hold one per delivery from its claim to its commit. It coalesces only when
// more deliveries are in flight than those connections: a router whose subscribers deliver
// concurrently (gochannel, several handlers on one RabbitMQ queue, a Kafka consumer group
// with one delivery per partition the process holds, NATS, Redis consumer groups).
//
// Handlers must only queue their writes ([inbox.ExecAtCommit]), as write-behind mode
// requires. The claim-first mode ([inbox.Config.WriteBehind] false, [inbox.TxFromContext])
// runs as on [NewPgx]: one connection per message from its claim to its commit,
// unpipelined.
//
// The store follows the pool's ConnConfig.DefaultQueryExecMode as [NewPgx] does: in the
// caching modes it prepares its texts by name on each connection once and binds them in
// the pipeline; in QueryExecModeExec, QueryExecModeSimpleProtocol and
// QueryExecModeDescribeExec it prepares nothing and sends each statement with its
// parameters in text, as QueryExecModeExec does, which PgBouncer in transaction mode passes
// on (it keeps a server connection until the last Sync of a pipeline is answered). pgx
// encodes the parameters with the connection's type map (nil, []byte, string, integers,
// time.Time, driver.Valuer and whatever else the map knows); an argument it cannot encode
// fails that message before anything is sent. A pgx.QueryRewriter (pgx.NamedArgs) as a
// statement's first argument rewrites it, as in a pgx.Batch. pgx's tracers do not see the
// pipelined statements: they are sent on the connection's pgconn.PgConn.
//
// [Config.Begin] is refused, as by [NewPgx]. PostgreSQL only: [MySQL]'s and MariaDB's protocol
// cannot pipeline.
func NewPgxPipeline(pool *pgxpool.Pool, config Config, pipeline PipelineConfig) (*Store, error) {
	if pool == nil {
		return nil, errors.New("sqlinbox: NewPgxPipeline: pool is nil")
	}
	if config.Begin != nil {
		return nil, errors.New("sqlinbox: NewPgxPipeline: Config.Begin is for stores made by NewDB; handlers of a pgx store get the pgx.Tx")
	}
	maxConns := int(pool.Config().MaxConns)
	switch {
	case pipeline.Connections < 0 || pipeline.Messages < 0:
		return nil, fmt.Errorf("sqlinbox: NewPgxPipeline: negative PipelineConfig %+v", pipeline)
	case pipeline.Connections > maxConns:
		return nil, fmt.Errorf("sqlinbox: NewPgxPipeline: PipelineConfig.Connections %d is more than the pool's MaxConns %d",
			pipeline.Connections, maxConns)
	}
	if pipeline.Connections == 0 {
		pipeline.Connections = maxConns
	}
	if pipeline.Messages == 0 {
		pipeline.Messages = defaultPipelineMessages
	}
	perPipeline, err := pipelineHistogram(pipeline.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("sqlinbox: NewPgxPipeline: metrics: %w", err)
	}
	s, err := NewPgx(pool, config)
	if err != nil {
		return nil, err
	}
	p := &pipelinePool{pgxPool: s.pool.(*pgxPool), perPipeline: perPipeline,
		tableAttr: metric.WithAttributeSet(attribute.NewSet(attribute.String("table", s.sql.table.label())))}
	p.combiner = newCombiner(pipeline.Connections, pipeline.Messages, pool.Acquire, (*pgxpool.Conn).Release, p.send)
	s.pool = p
	return s, nil
}

// pipelinePool is [NewPgx]'s pool whose write-behind sessions go through a combiner.
type pipelinePool struct {
	*pgxPool
	combiner *combiner[*pgxpool.Conn]

	perPipeline metric.Int64Histogram // inbox.pipeline.messages
	tableAttr   metric.RecordOption
}

// session returns a session that holds nothing yet: the claim-first mode acquires its
// connection at begin, write-behind mode hands its statements to the combiner.
func (p *pipelinePool) session(context.Context) (session, error) {
	return &pipelineSession{pool: p}, nil
}

// pipelineSession is one message on a store made by [NewPgxPipeline]: in the claim-first
// mode a pgxSession on a connection of its own, in write-behind mode a request to the
// combiner.
type pipelineSession struct {
	pool  *pipelinePool
	inner *pgxSession // set by begin
}

func (s *pipelineSession) begin(ctx context.Context, first []statement) (int, error) {
	conn, err := s.pool.pool.Acquire(ctx)
	if err != nil {
		return failedSetup, fmt.Errorf("sqlinbox: acquire a connection: %w", err)
	}
	s.inner = &pgxSession{pool: s.pool.pgxPool, conn: conn}
	return s.inner.begin(ctx, first)
}

func (s *pipelineSession) handle() any { return s.inner.handle() }

func (s *pipelineSession) commit(ctx context.Context, statements []statement) (int, error) {
	return s.inner.commit(ctx, statements)
}

func (s *pipelineSession) rollback(ctx context.Context) error { return s.inner.rollback(ctx) }

// run sends the message's statements in the next pipeline and waits for their result.
func (s *pipelineSession) run(ctx context.Context, statements []statement) (int, error) {
	r := newRequest(ctx, statements, nil)
	s.pool.combiner.do(r)
	return r.failed, r.err
}

// rollbackAndSelect: in write-behind mode the duplicate's transaction ended at its Sync, so
// the read is a request of its own, in the next pipeline.
func (s *pipelineSession) rollbackAndSelect(ctx context.Context, read claimRead) (*inbox.Record, error) {
	if s.inner != nil {
		return s.inner.rollbackAndSelect(ctx, read)
	}
	var prior claimRow
	r := newRequest(ctx, []statement{{sql: read.sql, args: read.args}}, &prior)
	s.pool.combiner.do(r)
	if r.err != nil {
		return nil, fmt.Errorf("sqlinbox: read the committed claim: %w", r.err)
	}
	return scanClaim(&prior, read.marks)
}

// abort: a message of a pipeline left no transaction open; its Sync ended it.
func (s *pipelineSession) abort(ctx context.Context, cause error) error {
	if s.inner != nil {
		return s.inner.abort(ctx, cause)
	}
	return cause
}

func (s *pipelineSession) lost() bool { return s.inner != nil && s.inner.lost() }

func (s *pipelineSession) raised(err error, transient func(error) bool) bool {
	return s.inner != nil && s.inner.raised(err, transient)
}

func (s *pipelineSession) release() {
	if s.inner != nil {
		s.inner.release()
	}
}

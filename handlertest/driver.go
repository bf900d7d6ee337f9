package handlertest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/inboxkit/watermill-inbox/internal/txmark"
)

// Connector wraps a database/sql connector so that handlertest can count and fail the
// handler's statements on the inbox transaction of a database/sql store: open the [*sql.DB]
// of the store, and of the handler's repositories, with sql.OpenDB(handlertest.Connector(c)).
// Outside a delivery of handlertest its connections forward every call unchanged.
//
// [*sql.Tx] is a concrete type handlertest cannot hand out a wrapper of, so it works one level
// down: the connection on which the store claims a delivery's message carries that
// delivery's inbox transaction; while the handler runs, each statement on it is counted and
// the injected one fails without reaching the database; after the handler returned, and
// before the store ends the transaction, a statement on it is refused ([ErrUsedAfterReturn]);
// statements with the message's context on other connections are noted as writes outside
// the inbox transaction. Every data layer over [*sql.Tx] (GORM, sqlx, ent, bun) reaches the
// same connection, so handlertest sees their statements too.
//
// For sqlinbox.NewMultiStatement, give it the driver's connector wrapped with [Connector]:
// sqlinbox.NewMultiStatement(handlertest.Connector(c), sqlinbox.MySQL{}, config).
func Connector(c driver.Connector) driver.Connector { return &connector{inner: c} }

// OpenDB opens a [*sql.DB] on the database/sql driver registered as driverName (for drivers
// used with [sql.Open], such as modernc.org/sqlite's "sqlite" or pgx's "pgx"), with its
// connections wrapped as [Connector] wraps them.
func OpenDB(driverName, dsn string) (*sql.DB, error) {
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("handlertest: open %q: %w", driverName, err)
	}
	d := probe.Driver()
	_ = probe.Close() // it opened no connection
	var c driver.Connector = dsnConnector{d, dsn}
	if dc, ok := d.(driver.DriverContext); ok {
		if c, err = dc.OpenConnector(dsn); err != nil {
			return nil, fmt.Errorf("handlertest: open %q: %w", driverName, err)
		}
	}
	return sql.OpenDB(Connector(c)), nil
}

// dsnConnector is the connector of a driver without [driver.DriverContext], as database/sql
// builds it for [sql.Open].
type dsnConnector struct {
	driver driver.Driver
	dsn    string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.driver.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.driver }

type connector struct{ inner driver.Connector }

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	inner, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: inner}, nil
}

func (c *connector) Driver() driver.Driver { return hookedDriver{c.inner.Driver()} }

// Close closes the wrapped connector if it has a Close; [sql.DB.Close] calls it.
func (c *connector) Close() error {
	if closer, ok := c.inner.(io.Closer); ok {
		return closer.Close()
	}
	return nil
}

type hookedDriver struct{ inner driver.Driver }

func (d hookedDriver) Open(name string) (driver.Conn, error) {
	inner, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &conn{inner: inner}, nil
}

// conn is one connection of [Connector]. database/sql uses a connection from one goroutine
// at a time; the lock is for the attempt it carries, which handlertest reads from elsewhere.
type conn struct {
	inner driver.Conn

	mu      sync.Mutex
	attempt *attempt // the delivery whose inbox transaction this connection carries
}

// carrier returns the attempt whose inbox transaction c carries, after adopting the
// attempt of ctx when its store is claiming and the connection begins a transaction.
func (c *conn) carrier(ctx context.Context, begins bool) *attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := attemptFrom(ctx); ok && begins && a.currentPhase() == phaseClaiming {
		c.attempt = a
		a.bind()
	}
	if c.attempt != nil && c.attempt.currentPhase() == phaseDone {
		c.attempt = nil
	}
	return c.attempt
}

func (c *conn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempt = nil
}

// gate decides a statement before it is sent: n is its number among the handler's, for
// uncount, 0 if it is not the handler's.
func (c *conn) gate(ctx context.Context, query string) (n int, err error) {
	a := c.carrier(ctx, txmark.Of(ctx)&txmark.Begins != 0)
	if a == nil {
		if other, ok := attemptFrom(ctx); ok {
			other.outsideStatement(query)
		}
		return 0, nil
	}
	v, err := a.connUse(query)
	if v == run && a.currentPhase() == phaseHandler {
		n = a.statementCount()
	}
	return n, err
}

// after releases the connection's attempt once a request the store marked as the end of
// its transaction succeeded (a multi-statement store ends its transactions with such
// requests, not through [driver.Tx]).
func (c *conn) after(ctx context.Context, n int, err error) {
	if errors.Is(err, driver.ErrSkip) && n > 0 {
		if a := c.carrier(context.Background(), false); a != nil {
			a.uncount(n)
		}
		return
	}
	if err == nil && txmark.Of(ctx)&txmark.Ends != 0 {
		c.release()
	}
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	s, err := c.inner.Prepare(query)
	if err != nil {
		return nil, err
	}
	return &stmt{inner: s, c: c, query: query}, nil
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	p, ok := c.inner.(driver.ConnPrepareContext)
	if !ok {
		return c.Prepare(query)
	}
	s, err := p.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{inner: s, c: c, query: query}, nil
}

func (c *conn) Close() error { return c.inner.Close() }

// Begin implements [driver.Conn]; database/sql calls BeginTx.
func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.carrier(ctx, true)
	var inner driver.Tx
	var err error
	if b, ok := c.inner.(driver.ConnBeginTx); ok {
		inner, err = b.BeginTx(ctx, opts)
	} else if opts != (driver.TxOptions{}) {
		err = fmt.Errorf("handlertest: the driver's connection %T has no BeginTx for options %+v", c.inner, opts)
	} else {
		//lint:ignore SA1019 a driver without BeginTx
		inner, err = c.inner.Begin()
	}
	if err != nil {
		c.release()
		return nil, err
	}
	return &connTx{inner: inner, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	execer, ok := c.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip // database/sql prepares it; stmt counts it then
	}
	n, err := c.gate(ctx, query)
	if err != nil {
		return nil, err
	}
	result, err := execer.ExecContext(ctx, query, args)
	c.after(ctx, n, err)
	return result, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	queryer, ok := c.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	n, err := c.gate(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := queryer.QueryContext(ctx, query, args)
	c.after(ctx, n, err)
	return rows, err
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if checker, ok := c.inner.(driver.NamedValueChecker); ok {
		return checker.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// connTx is the driver's transaction on a conn: its end releases the conn's attempt, and
// an end the handler asked for ([*sql.Tx]'s Commit or Rollback) is recorded.
type connTx struct {
	inner driver.Tx
	c     *conn
}

func (t *connTx) Commit() error   { return t.end("Commit", t.inner.Commit) }
func (t *connTx) Rollback() error { return t.end("Rollback", t.inner.Rollback) }

func (t *connTx) end(how string, f func() error) error {
	if a := t.c.carrier(context.Background(), false); a != nil {
		a.endedByHandler(how)
	}
	defer t.c.release()
	return f()
}

// stmt is a prepared statement of a conn: it is gated when it runs, not when it is
// prepared.
type stmt struct {
	inner driver.Stmt
	c     *conn
	query string
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	if _, err := s.c.gate(context.Background(), s.query); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 database/sql calls it for a driver without ExecContext
	return s.inner.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	if _, err := s.c.gate(context.Background(), s.query); err != nil {
		return nil, err
	}
	//lint:ignore SA1019 as Exec
	return s.inner.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if _, err := s.c.gate(ctx, s.query); err != nil {
		return nil, err
	}
	if e, ok := s.inner.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	values, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a driver without ExecContext
	return s.inner.Exec(values)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if _, err := s.c.gate(ctx, s.query); err != nil {
		return nil, err
	}
	if q, ok := s.inner.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	values, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 a driver without QueryContext
	return s.inner.Query(values)
}

// CheckNamedValue asks the statement's checker, else the connection's, as database/sql
// would ask them without the wrapper.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if checker, ok := s.inner.(driver.NamedValueChecker); ok {
		return checker.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

// plainValues turns named arguments into the positional ones of a driver that knows no
// names, as database/sql does for it.
func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	values := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, fmt.Errorf("handlertest: the driver does not support named argument %q", a.Name)
		}
		values[i] = a.Value
	}
	return values, nil
}

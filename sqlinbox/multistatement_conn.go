package sqlinbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/inboxkit/watermill-inbox/internal/txmark"
)

// multiStatementConnector wraps the driver's connector for [NewMultiStatement]'s pool. Its
// connections forward every call to the driver's, except that the store can begin a
// transaction with a multi-statement request of its own and have the next BeginTx adopt it,
// and end an adopted transaction with a request that ends in COMMIT: database/sql sends a
// transaction's BEGIN and its COMMIT each on its own, and only a connection the store owns
// can put them into a request. Transactions that anything else begins on the pool are the
// driver's own, unchanged. The store's requests that begin or end a transaction carry a
// txmark in their context, so that a connector the driver's is wrapped in (the handler
// kit's) knows where the transaction begins and ends without reading the SQL.
type multiStatementConnector struct{ connector driver.Connector }

func (c *multiStatementConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &multiStatementConn{conn: conn}, nil
}

func (c *multiStatementConnector) Driver() driver.Driver { return c.connector.Driver() }

// Close closes the wrapped connector if it has a Close; sql.DB.Close calls it.
func (c *multiStatementConnector) Close() error {
	if closer, ok := c.connector.(io.Closer); ok {
		return closer.Close()
	}
	return nil
}

// multiStatementConn is one connection of [NewMultiStatement]'s pool. database/sql uses a
// connection from one goroutine at a time, so its fields need no lock.
type multiStatementConn struct {
	conn driver.Conn
	// begun: the server is in a transaction that beginWith began and the next BeginTx adopts.
	begun bool
	// tx is the adopted transaction while it is open.
	tx *multiStatementTx
}

// errNeedsMultiStatements is what the connection returns when the driver wants to prepare one
// of the store's requests instead of sending it: several statements cannot be prepared as one.
var errNeedsMultiStatements = errors.New("sqlinbox: the driver would prepare a multi-statement request instead of " +
	"writing its parameters into the text: set interpolateParams=true and multiStatements=true in the DSN; with them, " +
	"a statement whose ? do not match its arguments does this too (a ? inside a string or comment, or a statement " +
	"after an unterminated /* comment, whose ? the driver then reads as the comment's)")

// beginWith sends request, which begins a transaction, and, if it succeeds, makes the next
// BeginTx adopt the transaction. If it fails, the server may be left in the
// transaction: the caller ends it on this connection (ROLLBACK) or discards the connection.
func (c *multiStatementConn) beginWith(ctx context.Context, request string, statements int, args []any) error {
	if c.begun || c.tx != nil {
		return errors.New("sqlinbox: begin: the connection is in a transaction already")
	}
	// The arguments as database/sql would pass them: checked by the driver, else converted
	// by the default converter.
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		err := c.CheckNamedValue(&named[i])
		if errors.Is(err, driver.ErrSkip) {
			named[i].Value, err = driver.DefaultParameterConverter.ConvertValue(a)
		}
		if err != nil {
			return fmt.Errorf("sqlinbox: argument %d: %w", i+1, err)
		}
	}
	result, err := c.execDriver(txmark.With(ctx, txmark.Begins), request, named)
	if err != nil {
		if errors.Is(err, driver.ErrSkip) {
			return errNeedsMultiStatements
		}
		return err
	}
	if err := checkResults(result, statements); err != nil {
		return err
	}
	c.begun = true
	return nil
}

func (c *multiStatementConn) execDriver(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	execer, ok := c.conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return execer.ExecContext(ctx, query, args)
}

func (c *multiStatementConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.begun {
		c.begun = false
		if opts != (driver.TxOptions{}) {
			// The transaction began with the driver's defaults.
			return nil, fmt.Errorf("sqlinbox: adopt transaction: options %+v: %w", opts, driver.ErrBadConn)
		}
		c.tx = &multiStatementTx{c: c}
		return c.tx, nil
	}
	if b, ok := c.conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	//lint:ignore SA1019 a driver without BeginTx
	return c.conn.Begin()
}

// Begin implements [driver.Conn]; database/sql calls BeginTx.
func (c *multiStatementConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *multiStatementConn) Prepare(query string) (driver.Stmt, error) { return c.conn.Prepare(query) }

func (c *multiStatementConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.conn.Prepare(query)
}

func (c *multiStatementConn) Close() error { return c.conn.Close() }

// ExecContext forwards every statement to the driver as it is, but the store's requests that
// end a transaction, which carry endsInCommit or holdsStatements as their last argument: it
// checks that the server ran each of their statements, COMMIT the last (see checkResults).
func (c *multiStatementConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if len(args) == 0 {
		return c.execDriver(ctx, query, args)
	}
	switch marker := args[len(args)-1].Value.(type) {
	case holdsStatements:
		result, err := c.execDriver(ctx, query, args[:len(args)-1])
		if errors.Is(err, driver.ErrSkip) {
			return nil, errNeedsMultiStatements
		}
		if err == nil {
			err = checkResults(result, marker.statements)
		}
		return result, err
	case endsInCommit:
		if c.tx == nil || c.tx.committed {
			return nil, errors.New("sqlinbox: commit request outside a transaction the store began")
		}
		result, err := c.execDriver(txmark.With(ctx, txmark.Ends), query+requestSeparator+sqlCommit, args[:len(args)-1])
		if errors.Is(err, driver.ErrSkip) {
			return nil, errNeedsMultiStatements
		}
		if err == nil {
			err = checkResults(result, marker.statements+1)
		}
		if err == nil {
			c.tx.committed = true
		}
		return result, err
	}
	return c.execDriver(ctx, query, args)
}

func (c *multiStatementConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

// CheckNamedValue keeps endsInCommit and holdsStatements for ExecContext and lets the driver
// check the rest.
func (c *multiStatementConn) CheckNamedValue(nv *driver.NamedValue) error {
	switch nv.Value.(type) {
	case endsInCommit, holdsStatements:
		return nil
	}
	if checker, ok := c.conn.(driver.NamedValueChecker); ok {
		return checker.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *multiStatementConn) Ping(ctx context.Context) error {
	if p, ok := c.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// ResetSession refuses a connection left in a transaction nobody adopted.
func (c *multiStatementConn) ResetSession(ctx context.Context) error {
	if c.begun || c.tx != nil {
		return driver.ErrBadConn
	}
	if r, ok := c.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// IsValid is false for a connection left in a transaction nobody adopted, so that
// database/sql closes it instead of pooling it.
func (c *multiStatementConn) IsValid() bool {
	if c.begun || c.tx != nil {
		return false
	}
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

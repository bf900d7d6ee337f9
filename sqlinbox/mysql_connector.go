package sqlinbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// MySQLConnector wraps a go-sql-driver/mysql connector (mysql.NewConnector) so that a store
// made by New with Config.MultiStatements on a *sql.DB opened on it (sql.OpenDB) sends a
// claim-first message in as few round trips as the handler allows: START TRANSACTION, the
// lock timeout and the claim as one text, and, when the handler queued statements or
// produced messages, those statements, the record and COMMIT as one text. Handlers still get
// a *sql.Tx from inbox.TxFromContext[*sql.Tx].
//
// database/sql sends a transaction's BEGIN and its COMMIT each on its own; only a connection
// the store owns can put them into a text. The wrapper's connections forward every call to
// the driver's, except that the store can begin a transaction with a text of its own and
// have the next BeginTx adopt it, and end an adopted transaction with a text that ends in
// COMMIT. Transactions that anything else begins on the same *sql.DB are the driver's own,
// unchanged.
//
// The texts need the DSN's multiStatements=true and interpolateParams=true; see
// Config.MultiStatements for what that costs.
func MySQLConnector(connector driver.Connector) driver.Connector {
	return &textConnector{connector}
}

type textConnector struct{ connector driver.Connector }

func (c *textConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &textConn{conn: conn}, nil
}

func (c *textConnector) Driver() driver.Driver { return textDriver{c.connector.Driver()} }

// Close closes the wrapped connector if it has a Close; sql.DB.Close calls it.
func (c *textConnector) Close() error {
	if closer, ok := c.connector.(io.Closer); ok {
		return closer.Close()
	}
	return nil
}

// textDriver is the driver sql.DB.Driver returns, for a store to recognise the wrapper.
type textDriver struct{ driver driver.Driver }

func (d textDriver) Open(name string) (driver.Conn, error) {
	conn, err := d.driver.Open(name)
	if err != nil {
		return nil, err
	}
	return &textConn{conn: conn}, nil
}

// usesTextConnector reports whether d is the driver of a *sql.DB opened on MySQLConnector.
func usesTextConnector(d driver.Driver) bool {
	_, ok := d.(textDriver)
	return ok
}

// textConn is one connection of a MySQLConnector. database/sql uses a connection from one
// goroutine at a time, so its fields need no lock.
type textConn struct {
	conn driver.Conn
	// begun: the server is in a transaction that beginWith began and the next BeginTx adopts.
	begun bool
	// tx is the adopted transaction while it is open.
	tx *textTx
}

// endsInCommit is the argument the store adds to an adopted transaction's last text: the
// connection sends the text with "; COMMIT" after it, and the transaction's Commit then sends
// nothing. NamedValueChecker's documentation provides for such arguments (special options to
// the query); the connection removes it before the driver sees the arguments.
type endsInCommit struct{}

// errNeedsTexts is what the connection returns when the driver wants to prepare one of the
// store's texts instead of sending it: several statements cannot be prepared as one.
var errNeedsTexts = errors.New("sqlinbox: the driver would prepare a text of several statements; " +
	"set interpolateParams=true and multiStatements=true in the DSN")

// beginWith sends START TRANSACTION and text as one text and, if it succeeds, makes the
// next BeginTx adopt the transaction. If it fails, the server may be left in the
// transaction: the caller ends it on this connection (ROLLBACK) or discards the connection.
func (c *textConn) beginWith(ctx context.Context, text string, args []any) error {
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
	if _, err := c.execDriver(ctx, "START TRANSACTION; "+text, named); err != nil {
		if errors.Is(err, driver.ErrSkip) {
			return errNeedsTexts
		}
		return err
	}
	c.begun = true
	return nil
}

func (c *textConn) execDriver(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	execer, ok := c.conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return execer.ExecContext(ctx, query, args)
}

func (c *textConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.begun {
		c.begun = false
		if opts != (driver.TxOptions{}) {
			// The transaction began with the driver's defaults.
			return nil, fmt.Errorf("sqlinbox: adopt transaction: options %+v: %w", opts, driver.ErrBadConn)
		}
		c.tx = &textTx{c: c}
		return c.tx, nil
	}
	if b, ok := c.conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.conn.Begin() //nolint:staticcheck // a driver without BeginTx
}

// Begin implements driver.Conn; database/sql calls BeginTx.
func (c *textConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *textConn) Prepare(query string) (driver.Stmt, error) { return c.conn.Prepare(query) }

func (c *textConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.conn.Prepare(query)
}

func (c *textConn) Close() error { return c.conn.Close() }

func (c *textConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	rest := args[:0:0]
	commit := false
	for _, a := range args {
		if _, ok := a.Value.(endsInCommit); ok {
			commit = true
			continue
		}
		rest = append(rest, a)
	}
	if !commit {
		return c.execDriver(ctx, query, args)
	}
	if c.tx == nil || c.tx.committed {
		return nil, errors.New("sqlinbox: commit text outside a transaction the store began")
	}
	for i := range rest {
		rest[i].Ordinal = i + 1
	}
	result, err := c.execDriver(ctx, query+"; COMMIT", rest)
	if errors.Is(err, driver.ErrSkip) {
		return nil, errNeedsTexts
	}
	if err == nil {
		c.tx.committed = true
	}
	return result, err
}

func (c *textConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.conn.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

// CheckNamedValue keeps endsInCommit for ExecContext and lets the driver check the rest.
func (c *textConn) CheckNamedValue(nv *driver.NamedValue) error {
	if _, ok := nv.Value.(endsInCommit); ok {
		return nil
	}
	if checker, ok := c.conn.(driver.NamedValueChecker); ok {
		return checker.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *textConn) Ping(ctx context.Context) error {
	if p, ok := c.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// ResetSession refuses a connection left in a transaction nobody adopted.
func (c *textConn) ResetSession(ctx context.Context) error {
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
func (c *textConn) IsValid() bool {
	if c.begun || c.tx != nil {
		return false
	}
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// textTx is a transaction that beginWith began and BeginTx adopted.
type textTx struct {
	c *textConn
	// committed: a text ending in COMMIT committed it.
	committed bool
}

func (t *textTx) Commit() error { return t.end("COMMIT") }

func (t *textTx) Rollback() error { return t.end("ROLLBACK") }

func (t *textTx) end(statement string) error {
	if t.c.tx != t {
		return driver.ErrBadConn
	}
	t.c.tx = nil
	if t.committed {
		return nil
	}
	// No context: database/sql ends a transaction with none (it watches the one the
	// transaction began with itself).
	_, err := t.c.execDriver(context.Background(), statement, nil)
	return err
}

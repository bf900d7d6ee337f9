package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// env holds the databases and what must be dropped and closed at the end.
type env struct {
	opts     options
	pg       *pgxpool.Pool // straight to the server
	pgInfo   string
	mysql    *sql.DB // straight to the server; nil: not reachable or off
	mysqlCfg *mysql.Config
	myInfo   string
	sqlite   *sql.DB // nil: off
	liteInfo string
	liteDir  string

	mu      sync.Mutex
	tables  []ownedTable
	closers []func()
}

type ownedTable struct{ db, name string }

func openEnv(ctx context.Context, o options) (_ *env, err error) {
	e := &env{opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	if e.pg, err = e.pgPool(ctx, 0); err != nil {
		return nil, fmt.Errorf("PostgreSQL (required) at %s: %w", o.postgres, err)
	}
	if err := e.pg.QueryRow(ctx, `SELECT 'PostgreSQL ' || current_setting('server_version')`).Scan(&e.pgInfo); err != nil {
		return nil, err
	}
	if o.mysql != "off" && o.mysql != "" {
		// The multi-statement store's messages travel as multi-statement requests
		// (sqlinbox.NewMultiStatement); the other variants send one statement at a time.
		cfg, err := mysql.ParseDSN(o.mysql)
		if err != nil {
			return nil, fmt.Errorf("-mysql: %w", err)
		}
		cfg.MultiStatements, cfg.InterpolateParams = true, true
		e.mysqlCfg = cfg
		if e.mysql, err = e.openMySQL(cfg); err != nil {
			return nil, err
		}
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = e.mysql.QueryRowContext(pingCtx, `SELECT VERSION()`).Scan(&e.myInfo)
		cancel()
		if err != nil {
			log.Printf("MariaDB/MySQL skipped: %v", err)
			e.mysql.Close()
			e.mysql = nil
		}
	}
	if o.sqlite != "off" {
		path := o.sqlite
		if path == "" {
			if e.liteDir, err = os.MkdirTemp("", "inbox-bench-"); err != nil {
				return nil, err
			}
			path = filepath.Join(e.liteDir, "bench.db")
		}
		// One connection: SQLite has one writer; more connections only trade Go-side waiting
		// for busy_timeout sleeps.
		if e.sqlite, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"); err != nil {
			return nil, err
		}
		e.sqlite.SetMaxOpenConns(1)
		if err := e.sqlite.QueryRowContext(ctx, `SELECT 'SQLite ' || sqlite_version()`).Scan(&e.liteInfo); err != nil {
			return nil, fmt.Errorf("SQLite: %w", err)
		}
		e.liteInfo += " (modernc.org/sqlite, WAL, one connection)"
	}
	return e, nil
}

// pgPool opens a pool to PostgreSQL whose connections count their writes and, for
// delay > 0, go through a delay proxy (in a child process) that delays each direction by
// delay.
func (e *env) pgPool(ctx context.Context, delay time.Duration) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(e.opts.postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	config.MaxConns = int32(slices.Max(e.opts.workers) + 4) // + cleanup, fills, size queries
	config.ConnConfig.DialFunc = countingDial
	config.ShouldPing = neverPing
	if delay == 0 {
		pool, err := pgxpool.NewWithConfig(ctx, config)
		if err != nil {
			return nil, err
		}
		e.onClose(pool.Close)
		return pool, pool.Ping(ctx)
	}
	target := net.JoinHostPort(config.ConnConfig.Host, fmt.Sprint(config.ConnConfig.Port))
	return e.pgPoolVia(ctx, config, target, delay)
}

// neverPing keeps pgxpool from pinging a connection that sat idle for over a second before
// handing it out. Interleaved variants leave connections idle while others run (8 in use,
// then 32), and those pings are socket writes that no message makes: one run counted 1.15
// round trips per message for a store that takes exactly 1.
func neverPing(context.Context, pgxpool.ShouldPingParams) bool { return false }

// maxWorkers is the most workers a comparison runs.
func maxWorkers(e *env) int { return slices.Max(e.opts.workers) }

// pgPoolVia opens a pool with config whose connections count their writes and go to target,
// through a delay proxy that delays each direction by delay (> 0).
func (e *env) pgPoolVia(ctx context.Context, config *pgxpool.Config, target string, delay time.Duration) (*pgxpool.Pool, error) {
	config = config.Copy()
	config.ShouldPing = neverPing
	if delay == 0 {
		config := config.Copy()
		config.ConnConfig.DialFunc = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return countingDial(ctx, network, target)
		}
		pool, err := pgxpool.NewWithConfig(ctx, config)
		if err != nil {
			return nil, err
		}
		return pool, pool.Ping(ctx)
	}
	return viaDelayProxy(e, target, delay, func(addr string) (*pgxpool.Pool, func(), func() (time.Duration, error), error) {
		config := config.Copy()
		config.ConnConfig.DialFunc = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return countingDial(ctx, network, addr)
		}
		pool, err := pgxpool.NewWithConfig(ctx, config)
		if err != nil {
			return nil, nil, nil, err
		}
		return pool, pool.Close, func() (time.Duration, error) { return rtt(ctx, pool) }, pool.Ping(ctx)
	})
}

// viaDelayProxy starts a delay proxy to target and opens a client through it. A proxy whose
// round trip exceeds twice the delay by more than a millisecond (its wake-ups are late: one
// in a full run measured 2.4 ms at 0.25 ms each way) is replaced, up to three times.
func viaDelayProxy[C any](e *env, target string, delay time.Duration, open func(addr string) (client C, close func(), rtt func() (time.Duration, error), err error)) (C, error) {
	var zero C
	for attempt := 1; ; attempt++ {
		addr, stop, err := spawnDelayProxy(target, delay)
		if err != nil {
			return zero, err
		}
		client, closeClient, measure, err := open(addr)
		var r time.Duration
		if err == nil {
			r, err = measure()
		}
		if err == nil && (r <= 2*delay+time.Millisecond || attempt == 3) {
			e.onClose(stop)
			e.onClose(closeClient)
			return client, nil
		}
		if closeClient != nil {
			closeClient()
		}
		stop()
		if err != nil {
			return zero, err
		}
		log.Printf("delay proxy, %s each way: round trip %s, more than twice the delay plus 1 ms: starting another", delay, r)
	}
}

// openMySQL opens a pool on cfg.
func (e *env) openMySQL(cfg *mysql.Config) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return e.sized(sql.OpenDB(connector)), nil
}

// sized gives db a connection for every worker and two more.
func (e *env) sized(db *sql.DB) *sql.DB {
	db.SetMaxOpenConns(slices.Max(e.opts.workers) + 2)
	db.SetMaxIdleConns(slices.Max(e.opts.workers) + 2)
	return db
}

// mysqlAddr is where MariaDB/MySQL is reached: a pool on it for the statement-at-a-time
// variants, and the driver's connector for sqlinbox.NewMultiStatement's.
type mysqlAddr struct {
	plain     *sql.DB
	connector driver.Connector
}

// mysqlAt returns MariaDB/MySQL reached straight (delay 0) or through a delay proxy.
func (e *env) mysqlAt(ctx context.Context, delay time.Duration) (mysqlAddr, error) {
	if delay == 0 {
		connector, err := mysql.NewConnector(e.mysqlCfg)
		return mysqlAddr{e.mysql, connector}, err
	}
	return viaDelayProxy(e, e.mysqlCfg.Addr, delay, func(addr string) (mysqlAddr, func(), func() (time.Duration, error), error) {
		cfg := e.mysqlCfg.Clone()
		cfg.Addr = addr
		plain, err := e.openMySQL(cfg)
		if err != nil {
			return mysqlAddr{}, nil, nil, err
		}
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			plain.Close()
			return mysqlAddr{}, nil, nil, err
		}
		return mysqlAddr{plain, connector}, func() { plain.Close() }, func() (time.Duration, error) { return sqlRTT(ctx, plain) }, nil
	})
}

// sqlRTT measures the median round trip of an empty statement on one of db's connections.
func sqlRTT(ctx context.Context, db *sql.DB) (time.Duration, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return medianTime(func() error {
		_, err := conn.ExecContext(ctx, "DO 1")
		return err
	})
}

// rtt measures the median round trip of an empty query on one of pool's connections.
func rtt(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return medianTime(func() error { return conn.Conn().PgConn().Exec(ctx, ";").Close() })
}

// medianTime returns the median time of 51 calls of f.
func medianTime(f func() error) (time.Duration, error) {
	times := make([]time.Duration, 51)
	for i := range times {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		times[i] = time.Since(start)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

func (e *env) onClose(f func()) {
	e.mu.Lock()
	e.closers = append(e.closers, f)
	e.mu.Unlock()
}

// table returns a new random table name on db ("postgres", "mysql", "sqlite"), to be
// dropped by close.
func (e *env) table(db, prefix string) string {
	name := testenv.Name(prefix)
	e.mu.Lock()
	e.tables = append(e.tables, ownedTable{db: db, name: name})
	e.mu.Unlock()
	return name
}

func (e *env) dropTable(ctx context.Context, t ownedTable) error {
	query := "DROP TABLE IF EXISTS " + t.name
	var err error
	switch {
	case t.db == "postgres" && e.pg != nil:
		_, err = e.pg.Exec(ctx, query)
	case t.db == "mysql" && e.mysql != nil:
		_, err = e.mysql.ExecContext(ctx, query)
	case t.db == "sqlite" && e.sqlite != nil:
		_, err = e.sqlite.ExecContext(ctx, query)
	}
	if err != nil {
		return fmt.Errorf("drop %s table %s: %w", t.db, t.name, err)
	}
	return nil
}

// close drops every table still owned, with a context of its own (the run's may be
// cancelled), and closes the databases and proxies.
func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	e.mu.Lock()
	tables, closers := e.tables, e.closers
	e.tables, e.closers = nil, nil
	e.mu.Unlock()
	for _, t := range tables {
		errs = append(errs, e.dropTable(ctx, t))
	}
	if len(tables) > 0 {
		log.Printf("dropped %d tables", len(tables))
	}
	for _, f := range slices.Backward(closers) {
		f()
	}
	for _, db := range []*sql.DB{e.mysql, e.sqlite} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if e.liteDir != "" {
		errs = append(errs, os.RemoveAll(e.liteDir))
	}
	return errors.Join(errs...)
}

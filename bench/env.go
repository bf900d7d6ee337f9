package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// pgWrites counts writes to PostgreSQL sockets. pgx buffers a request (a batch too) and
// flushes it with one write, so writes per message count its round trips.
var pgWrites atomic.Int64

// env holds the databases and what must be dropped at the end.
type env struct {
	opts     options
	pg       *pgxpool.Pool
	pgInfo   string
	mysql    *sql.DB // nil: not reachable or off
	myInfo   string
	sqlite   *sql.DB // nil: off
	liteInfo string
	liteDir  string

	mu     sync.Mutex
	tables []ownedTable
}

type ownedTable struct {
	db   string // "postgres", "mysql", "sqlite"
	name string
}

func openEnv(ctx context.Context, o options) (_ *env, err error) {
	e := &env{opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	config, err := pgxpool.ParseConfig(o.postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	config.MaxConns = int32(slices.Max(o.workers) + 4) // + cleanup, fills, size queries
	config.MinConns = 0
	config.ConnConfig.DialFunc = countingDialer
	if e.pg, err = pgxpool.NewWithConfig(ctx, config); err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.pg.QueryRow(pingCtx, `SELECT version()`).Scan(&e.pgInfo); err != nil {
		return nil, fmt.Errorf("PostgreSQL (required) at %s: %w", o.postgres, err)
	}

	if o.mysql != "off" && o.mysql != "" {
		if db, info, err := openMySQL(ctx, o.mysql, slices.Max(o.workers)); err != nil {
			log.Printf("MariaDB/MySQL skipped: %v", err)
		} else {
			e.mysql, e.myInfo = db, info
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
		dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		e.sqlite = db
		if err := db.QueryRowContext(ctx, `SELECT 'SQLite ' || sqlite_version()`).Scan(&e.liteInfo); err != nil {
			return nil, fmt.Errorf("SQLite: %w", err)
		}
		e.liteInfo += " (modernc.org/sqlite, WAL, synchronous=FULL, one connection)"
	}
	return e, nil
}

func openMySQL(ctx context.Context, dsn string, conns int) (*sql.DB, string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, "", err
	}
	db.SetMaxOpenConns(conns + 2)
	db.SetMaxIdleConns(conns + 2)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var version string
	if err := db.QueryRowContext(pingCtx, `SELECT VERSION()`).Scan(&version); err != nil {
		db.Close()
		return nil, "", err
	}
	return db, version, nil
}

// table returns a new random table name on db, to be dropped by close.
func (e *env) table(db, prefix string) string {
	name := testenv.Name(prefix)
	e.mu.Lock()
	e.tables = append(e.tables, ownedTable{db: db, name: name})
	e.mu.Unlock()
	return name
}

// drop drops one table now (and forgets it).
func (e *env) drop(ctx context.Context, db, name string) error {
	e.mu.Lock()
	e.tables = slices.DeleteFunc(e.tables, func(t ownedTable) bool { return t.db == db && t.name == name })
	e.mu.Unlock()
	return e.dropTable(ctx, ownedTable{db: db, name: name})
}

func (e *env) dropTable(ctx context.Context, t ownedTable) error {
	query := "DROP TABLE IF EXISTS " + t.name
	var err error
	switch t.db {
	case "postgres":
		if e.pg != nil {
			_, err = e.pg.Exec(ctx, query)
		}
	case "mysql":
		if e.mysql != nil {
			_, err = e.mysql.ExecContext(ctx, query)
		}
	case "sqlite":
		if e.sqlite != nil {
			_, err = e.sqlite.ExecContext(ctx, query)
		}
	}
	if err != nil {
		return fmt.Errorf("drop %s table %s: %w", t.db, t.name, err)
	}
	return nil
}

// close drops every table still owned, with a context of its own (the run's may be
// cancelled), and closes the databases.
func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	e.mu.Lock()
	tables := e.tables
	e.tables = nil
	e.mu.Unlock()
	for _, t := range tables {
		errs = append(errs, e.dropTable(ctx, t))
	}
	if len(tables) > 0 {
		log.Printf("dropped %d tables", len(tables))
	}
	if e.pg != nil {
		e.pg.Close()
	}
	if e.mysql != nil {
		errs = append(errs, e.mysql.Close())
	}
	if e.sqlite != nil {
		errs = append(errs, e.sqlite.Close())
	}
	if e.liteDir != "" {
		errs = append(errs, os.RemoveAll(e.liteDir))
	}
	return errors.Join(errs...)
}

func countingDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn}, nil
}

type countingConn struct{ net.Conn }

func (c *countingConn) Write(p []byte) (int, error) {
	pgWrites.Add(1)
	return c.Conn.Write(p)
}

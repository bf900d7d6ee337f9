package inboxcli

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// inboxDB is an open database with a store on the command's table.
type inboxDB struct {
	db      *sql.DB
	dialect sqlinbox.Dialect
	store   *sqlinbox.Store
}

func (d *inboxDB) Close() error { return d.db.Close() }

// connect opens the target's database, checks that it answers and builds a store on the
// table. Unless the command creates the schema (creates), a SQLite file must exist already
// and so must the table.
func (c *command) connect(ctx context.Context, creates bool) (*inboxDB, error) {
	d, err := c.open(ctx, creates)
	if err != nil {
		return nil, err
	}
	if !creates {
		if err := d.checkTable(ctx, c.table); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// open is connect without the check that the table exists.
func (c *command) open(ctx context.Context, creates bool) (*inboxDB, error) {
	d, dsn, err := c.resolve(true)
	if err != nil {
		return nil, err
	}
	name := d.Dialect.Name()
	db, err := d.Open(dsn, creates)
	if err != nil {
		return nil, fmt.Errorf("open the %s database: %w", name, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the %s database: %w", name, err)
	}
	store, err := sqlinbox.NewDB(db, d.Dialect, sqlinbox.Config{Table: c.table})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &inboxDB{db: db, dialect: d.Dialect, store: store}, nil
}

// checkTable fails with a clear message when the inbox table does not exist.
func (d *inboxDB) checkTable(ctx context.Context, table string) error {
	parsed, err := d.dialect.ParseTable(table)
	quoted := parsed.Quoted
	if err != nil {
		return err
	}
	rows, err := d.db.QueryContext(ctx, "SELECT consumer, message_id, processed_at FROM "+quoted+" WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("inbox table %q is missing or unreadable (create it with \"watermill-inbox migrate\", "+
			"or with your migration tool from the files of \"watermill-inbox schema -format goose -out DIR\"): %w", table, err)
	}
	return rows.Close()
}

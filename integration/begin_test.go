package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// appTx stands for a data layer's own transaction type (sqlx's *sqlx.Tx, bun's bun.Tx): a
// value its library builds over a *sql.Tx.
type appTx struct{ *sql.Tx }

// beginApp begins the data layer's transaction on db, as sqlx's BeginTxx would.
func beginApp(db *sql.DB) sqlinbox.BeginFunc {
	return sqlinbox.BeginWith(func(ctx context.Context, opts *sql.TxOptions) (*appTx, error) {
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &appTx{tx}, nil
	}, func(tx *appTx) *sql.Tx { return tx.Tx })
}

// The conformance suite on stores whose transactions the data layer begins (Config.Begin):
// handlers get the data layer's type, and everything else holds unchanged.
func TestStoreConformanceWithConfigBegin(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"database-sql/postgres", "database-sql/mariadb", "database-sql/sqlite"} {
		t.Run(name, func(t *testing.T) {
			inboxtest.Run(t, func(t *testing.T) *inboxtest.Harness {
				b := backends[name](t)
				db := b.direct.(sqlRunner).q.(*sql.DB)
				store, err := sqlinbox.NewDB(db, b.dialect, sqlinbox.Config{Table: b.table, Begin: beginApp(db)})
				if err != nil {
					t.Fatal(err)
				}
				b.store = store
				dollar := b.dialect.Name() == (sqlinbox.Postgres{}).Name()
				b.inTx = func(ctx context.Context) (runner, bool) {
					tx, ok := inbox.TxFromContext[*appTx](ctx)
					if !ok {
						return nil, false
					}
					return sqlRunner{tx.Tx, dollar}, true
				}
				// Through the data layer's begin, the store's pool is the direct one: the
				// proxy that an outage cuts is not in the way.
				b.outage = nil
				return b.harness()
			}, nil)
		})
	}
}

func TestConfigBeginBadInput(t *testing.T) {
	b := backends["database-sql/postgres"](t)
	db := b.direct.(sqlRunner).q.(*sql.DB)

	if _, _, err := sqlinbox.NewMultiStatement(mysqlConnector(t, testenv.MySQLDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Begin: beginApp(db)}); err == nil ||
		!strings.Contains(err.Error(), "Config.Begin") {
		t.Errorf("NewMultiStatement with Begin: err = %v, want an error naming Config.Begin", err)
	}
	if _, err := sqlinbox.NewPgx(openPgxPool(t, testenv.PostgresURL(t)), sqlinbox.Config{Begin: beginApp(db)}); err == nil ||
		!strings.Contains(err.Error(), "Config.Begin") {
		t.Errorf("NewPgx with Begin: err = %v, want an error naming Config.Begin", err)
	}

	errDown := errors.New("the data layer cannot begin")
	for name, begin := range map[string]sqlinbox.BeginFunc{
		"begin fails": sqlinbox.BeginWith(func(context.Context, *sql.TxOptions) (*appTx, error) { return nil, errDown },
			func(tx *appTx) *sql.Tx { return tx.Tx }),
		"no *sql.Tx under the transaction": sqlinbox.BeginWith(func(context.Context, *sql.TxOptions) (*appTx, error) { return &appTx{}, nil },
			func(tx *appTx) *sql.Tx { return tx.Tx }),
	} {
		t.Run(name, func(t *testing.T) {
			store, err := sqlinbox.NewDB(db, b.dialect, sqlinbox.Config{Table: b.table, Begin: begin})
			if err != nil {
				t.Fatal(err)
			}
			mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			h := mw(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })
			if err := deliver(context.Background(), h, "order-1"); err == nil || !strings.Contains(err.Error(), "begin") {
				t.Errorf("err = %v, want the begin's error (a nack)", err)
			}
			if ran {
				t.Error("the handler ran without a transaction")
			}
			wantRows(t, "claims", b.rows(t, b.table, ""), 0)
		})
	}
}

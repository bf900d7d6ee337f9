package gormrepo_test

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// BenchmarkGORMHandle is the cost of getting a *gorm.DB on the inbox transaction, once per
// message: gorm.Open on the *sql.Tx against a session of one shared *gorm.DB. Every
// iteration runs inside one real inbox transaction (one message's handler), so only the
// open is measured, and, on MariaDB, the SELECT VERSION() round trip an open sends unless
// SkipInitializeWithVersion is set.
func BenchmarkGORMHandle(b *testing.B) {
	for _, db := range gormBenchDatabases {
		benchGORMHandle(b, db)
	}
}

// gormBenchDatabase is a database BenchmarkGORMHandle runs on: how to reach it, the shared
// *gorm.DB's dialector, and the dialectors opened on the *sql.Tx, by variant name.
type gormBenchDatabase struct {
	name    string
	driver  string
	dsn     func(testing.TB) string
	dialect sqlinbox.Dialect
	shared  func(*sql.DB) gorm.Dialector
	open    map[string]func(*sql.Tx) gorm.Dialector
}

var gormBenchDatabases = []gormBenchDatabase{
	{"PostgreSQL", "pgx", testenv.PostgresURL, sqlinbox.Postgres{},
		func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) },
		map[string]func(*sql.Tx) gorm.Dialector{
			"open": func(tx *sql.Tx) gorm.Dialector { return postgres.New(postgres.Config{Conn: tx}) },
		}},
	{"MariaDB", "mysql", testenv.MySQLDSN, sqlinbox.MySQL{},
		func(db *sql.DB) gorm.Dialector {
			return mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true})
		},
		map[string]func(*sql.Tx) gorm.Dialector{
			"open": func(tx *sql.Tx) gorm.Dialector { return mysql.New(mysql.Config{Conn: tx}) },
			"open-skip-version": func(tx *sql.Tx) gorm.Dialector {
				return mysql.New(mysql.Config{Conn: tx, SkipInitializeWithVersion: true})
			},
		}},
}

// quiet is the GORM configuration of the benchmark: no logging.
var quiet = &gorm.Config{Logger: logger.Discard}

// benchGORMHandle runs every variant on db, each inside the inbox transaction of one message.
func benchGORMHandle(b *testing.B, db gormBenchDatabase) {
	sqlDB, err := sql.Open(db.driver, db.dsn(b))
	if err != nil {
		b.Fatal(err)
	}
	defer sqlDB.Close()
	table := testenv.Name("inbox")
	store, err := sqlinbox.NewDB(sqlDB, db.dialect, sqlinbox.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer sqlDB.Exec("DROP TABLE " + table)
	shared, err := gorm.Open(db.shared(sqlDB), quiet)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	// inHandler runs loop in the handler of one message, inside its inbox transaction.
	inHandler := func(b *testing.B, loop txLoop) {
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			tx, _ := inbox.TxFromContext[*sql.Tx](msg.Context())
			b.ResetTimer()
			err := loop(b, msg.Context(), tx)
			b.StopTimer()
			return nil, err
		})
		if err := inboxtest.Deliver(context.Background(), h, testenv.Name("msg")); err != nil {
			b.Fatal(err)
		}
	}
	for _, v := range gormVariants(shared, db.open) {
		b.Run(db.name+"/"+v.name, func(b *testing.B) { inHandler(b, v.loop) })
	}
}

// gormVariant is one way to get a *gorm.DB on the inbox transaction.
type gormVariant struct {
	name string
	loop txLoop
}

// txLoop is the b.N iterations of one variant, in a handler with ctx and tx.
type txLoop func(b *testing.B, ctx context.Context, tx *sql.Tx) error

// gormVariants returns the variants: a session of shared (inboxgorm.DB), then a gorm.Open
// on the *sql.Tx per dialector of open, by name.
func gormVariants(shared *gorm.DB, open map[string]func(*sql.Tx) gorm.Dialector) []gormVariant {
	variants := []gormVariant{{"session", func(b *testing.B, ctx context.Context, _ *sql.Tx) error {
		for range b.N {
			if _, ok := inboxgorm.DB(ctx, shared); !ok {
				b.Fatal("no inbox transaction")
			}
		}
		return nil
	}}}
	for _, name := range slices.Sorted(maps.Keys(open)) {
		dialector := open[name]
		variants = append(variants, gormVariant{name, func(b *testing.B, _ context.Context, tx *sql.Tx) error {
			for range b.N {
				if _, err := gorm.Open(dialector(tx), quiet); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	return variants
}

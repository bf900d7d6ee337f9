package handlertest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver, for ExampleOpenDB

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/internal/pgtest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// exampleT stands in, in these examples, for the t of a test, which an Example has none
// of: it drops what the kit reports and logs, and the examples print the Result instead.
// In a test, pass the test's t.
type exampleT struct{ testing.TB }

func (exampleT) Helper()               {}
func (exampleT) Errorf(string, ...any) {}
func (exampleT) Logf(string, ...any)   {}

// examplePool opens a pool with more connections than the 4 concurrent copies hold, so
// that a handler that takes a second one (ExampleResult's bug) does not wait for ever.
func examplePool(ctx context.Context) *pgxpool.Pool {
	config, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		panic(err)
	}
	config.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		panic(err)
	}
	return pool
}

// books is the state the examples' handlers change: the rows of two tables.
type books struct{ Invoices, Ledger []string }

// exampleTables creates an inbox store and two business tables with names no other run
// uses, and returns them with a Snapshot and a Reset of the tables; drop drops them.
func exampleTables(ctx context.Context, pool *pgxpool.Pool) (store *sqlinbox.Store, invoices, ledger string,
	snapshot func(context.Context) (any, error), reset func(context.Context) error, drop func(),
) {
	inboxTable := pgtest.Name("example_inbox")
	invoices, ledger = pgtest.Name("example_invoices"), pgtest.Name("example_ledger")
	drop = func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+inboxTable+", "+invoices+", "+ledger)
	}
	for _, table := range []string{invoices, ledger} {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (order_id text NOT NULL)"); err != nil {
			panic(err)
		}
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		panic(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		panic(err)
	}
	rowsOf := func(ctx context.Context, table string) ([]string, error) {
		rows, err := pool.Query(ctx, "SELECT order_id FROM "+table+" ORDER BY order_id")
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	snapshot = func(ctx context.Context) (any, error) {
		var b books
		var err error
		if b.Invoices, err = rowsOf(ctx, invoices); err != nil {
			return nil, err
		}
		b.Ledger, err = rowsOf(ctx, ledger)
		return b, err
	}
	reset = func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "DELETE FROM "+invoices+"; DELETE FROM "+ledger)
		return err
	}
	return store, invoices, ledger, snapshot, reset, drop
}

// A handler that writes its invoice and ledger line through the inbox transaction and
// publishes InvoiceIssued through an inbox.Publisher passes every scenario. The Recorder
// behind that Publisher shows the kit what it publishes, and the Result what the reference
// delivery produced.
func Example() {
	ctx := context.Background() // in a test: t.Context()
	pool := examplePool(ctx)
	defer pool.Close()
	store, invoices, ledger, snapshot, reset, drop := exampleTables(ctx, pool)
	defer drop()

	recorder := handlertest.NewRecorder() // the broker, for the kit
	publisher, err := inbox.NewPublisher(recorder)
	if err != nil {
		panic(err)
	}
	handler := func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return nil, errors.New("no inbox transaction")
		}
		for _, table := range []string{invoices, ledger} {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (order_id) VALUES ($1)", string(msg.Payload)); err != nil {
				return nil, err
			}
		}
		issued := message.NewMessage(watermill.NewUUID(), msg.Payload)
		issued.SetContext(ctx) // recorded with the claim, sent after the commit
		return nil, publisher.Publish("invoices.issued", issued)
	}

	res := handlertest.Run(ctx, exampleT{}, handlertest.Case{
		Handler:  handler,
		Store:    store,
		Config:   inbox.Config{Consumer: "billing", Publisher: publisher},
		Message:  message.NewMessage("order-1", []byte("order-1")),
		Snapshot: snapshot,
		Reset:    reset,
	}, &handlertest.Options{Recorder: recorder})
	fmt.Println("problems:", len(res.Problems))
	for _, m := range res.Produced {
		fmt.Printf("produced: %s %s\n", m.Topic, m.Payload)
	}
	// Output:
	// problems: 0
	// produced: invoices.issued order-1
}

// A handler whose ledger repository was built on the pool, not on the inbox transaction,
// leaves its ledger line behind when the delivery fails after it: the Failures scenario
// reports it, and a test can read each problem in parts.
func ExampleResult() {
	ctx := context.Background() // in a test: t.Context()
	pool := examplePool(ctx)
	defer pool.Close()
	store, invoices, ledger, snapshot, reset, drop := exampleTables(ctx, pool)
	defer drop()

	handler := func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return nil, errors.New("no inbox transaction")
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (order_id) VALUES ($1)", string(msg.Payload)); err != nil {
			return nil, err
		}
		_, err := pool.Exec(ctx, "INSERT INTO "+ledger+" (order_id) VALUES ($1)", string(msg.Payload)) // the bug
		return nil, err
	}

	res := handlertest.Run(ctx, exampleT{}, handlertest.Case{
		Handler:  handler,
		Store:    store,
		Config:   inbox.Config{Consumer: "billing"},
		Message:  message.NewMessage("order-1", []byte("order-1")),
		Snapshot: snapshot,
		Reset:    reset,
	}, nil)
	for _, p := range res.Problems {
		fmt.Printf("%s (%s): %s\n", p.Scenario, p.Step, p.Details[0])
		fmt.Println("probable cause:", p.Cause)
	}
	// Output:
	// failures (COMMIT fails): Ledger: 1 rows, want 0 (extra: "order-1")
	// probable cause: a write outside the inbox transaction: a repository on the pool, or a goroutine that writes after the handler returned?
	// failures (the handler returns, then a panic): Ledger: 1 rows, want 0 (extra: "order-1")
	// probable cause: a write outside the inbox transaction: a repository on the pool, or a goroutine that writes after the handler returned?
}

// On database/sql the kit counts and fails statements in the connections of a *sql.DB it
// opens: build the store, and the handler's repositories, on it.
func ExampleOpenDB() {
	ctx := context.Background() // in a test: t.Context()
	db, err := handlertest.OpenDB("pgx", pgtest.URL())
	if err != nil {
		panic(err)
	}
	defer db.Close()
	inboxTable, invoices := pgtest.Name("example_inbox"), pgtest.Name("example_invoices")
	defer db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+inboxTable+", "+invoices)
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+invoices+" (order_id text NOT NULL)"); err != nil {
		panic(err)
	}
	store, err := sqlinbox.NewDB(db, sqlinbox.Postgres{}, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		panic(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		panic(err)
	}

	res := handlertest.Run(ctx, exampleT{}, handlertest.Case{
		Handler: func(msg *message.Message) ([]*message.Message, error) {
			tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
			if !ok {
				return nil, errors.New("no inbox transaction")
			}
			_, err := tx.ExecContext(msg.Context(), "INSERT INTO "+invoices+" (order_id) VALUES ($1)", string(msg.Payload))
			return nil, err
		},
		Store:   store,
		Config:  inbox.Config{Consumer: "billing"},
		Message: message.NewMessage("order-1", []byte("order-1")),
		Snapshot: func(ctx context.Context) (any, error) {
			var n int
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+invoices).Scan(&n)
			return n, err
		},
		Reset: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DELETE FROM "+invoices)
			return err
		},
	}, nil)
	fmt.Println("problems:", len(res.Problems))
	// Output: problems: 0
}

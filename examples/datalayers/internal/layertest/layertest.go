// Package layertest is the test every data layer example passes: the inbox guarantees
// (one effect per message, none for a failed handler) checked through that data layer's own
// repository, its nested transactions, its own Commit and Rollback, write-behind mode, and
// the trap of a repository left on the pool.
package layertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/inboxtest"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// Layer is one data layer wired to an inbox store. Every function gets the handler's
// context (msg.Context()) and writes one invoice for order, in the table "invoices" of the
// database DB reaches.
type Layer struct {
	// Store is the inbox store, on the database of DB.
	Store inbox.Store
	// DB reaches the same database outside any transaction; the suite counts invoices with it.
	DB *sql.DB
	// Postgres is true for PostgreSQL ($1 placeholders), false for MariaDB.
	Postgres bool

	// Record is the repository method under test, on the inbox transaction.
	Record func(ctx context.Context, order billing.OrderPlaced) error
	// RecordOnPool is the same repository wired with the application's pool: the trap.
	RecordOnPool func(ctx context.Context, order billing.OrderPlaced) error
	// Nested records order in the data layer's own nested transaction (a savepoint), then
	// runs then: if then fails, the nested transaction rolls back and Nested returns then's
	// error; otherwise it commits.
	Nested func(ctx context.Context, order billing.OrderPlaced, then func() error) error
	// EndTx commits (or rolls back) the inbox transaction through the data layer's own
	// method. Nil: the data layer offers none; NoEndTx says why.
	EndTx   func(ctx context.Context, commit bool) error
	NoEndTx string
	// Queue queues the invoice's insert with inbox.ExecAtCommit, from SQL the data layer renders,
	// for write-behind mode. Nil: the data layer cannot; NoQueue says why.
	Queue   func(ctx context.Context, order billing.OrderPlaced) error
	NoQueue string
}

// errBusiness is what the suite's failing handlers return.
var errBusiness = errors.New("business rule failed")

// Run runs every case on layer, each as a subtest.
func Run(t *testing.T, layer Layer) {
	s := &suite{Layer: layer}
	t.Run("three copies give one invoice", s.testThreeCopies)
	t.Run("a failed handler leaves no invoice", s.testFailedHandler)
	t.Run("a nested transaction commits with the claim or rolls back alone", s.testNested)
	t.Run("the data layer's own commit or rollback is a nack", s.testEndTx)
	t.Run("write-behind mode", s.testWriteBehind)
	t.Run("a repository on the pool escapes the transaction", s.testTrap)
}

type suite struct{ Layer }

func (s *suite) handler(t *testing.T, config inbox.Config, fn func(ctx context.Context, order billing.OrderPlaced) error) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(s.Store, config, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		order, err := billing.DecodeOrder(msg)
		if err != nil {
			return nil, err
		}
		return nil, fn(msg.Context(), order)
	})
}

// Handler returns fn behind an inbox middleware on store, for consumer "billing", for a data
// layer's own tests beside Run.
func Handler(t *testing.T, store inbox.Store, fn func(ctx context.Context, order billing.OrderPlaced) error) message.HandlerFunc {
	t.Helper()
	return (&suite{Layer: Layer{Store: store}}).handler(t, inbox.Config{Consumer: "billing"}, fn)
}

// Deliver hands h the OrderPlaced message of orderID, as a router would; nil is an ack.
func Deliver(h message.HandlerFunc, orderID string) error { return deliver(h, orderID) }

// deliver hands h the OrderPlaced message of orderID, as a router would; nil is an ack.
func deliver(h message.HandlerFunc, orderID string) error {
	msg, err := billing.NewOrderMessage(billing.OrderPlaced{OrderID: orderID, AmountCents: 1250})
	if err != nil {
		return err
	}
	msg.SetContext(context.Background())
	_, err = h(msg)
	return err
}

func (s *suite) invoices(t *testing.T, orderID string) int {
	t.Helper()
	query := "SELECT COUNT(*) FROM invoices WHERE order_id = ?"
	if s.Postgres {
		query = inboxtest.DollarPlaceholders(query)
	}
	var n int
	if err := s.DB.QueryRow(query, orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (s *suite) testThreeCopies(t *testing.T) {
	orderID := testenv.Name("order")
	var runs int
	h := s.handler(t, inbox.Config{Consumer: "billing"}, func(ctx context.Context, order billing.OrderPlaced) error {
		runs++
		if err := s.Record(ctx, order); err != nil {
			return err
		}
		// Written in the inbox transaction, the invoice is not visible outside before COMMIT.
		if n := s.invoices(t, order.OrderID); n != 0 {
			return fmt.Errorf("the invoice is visible outside the inbox transaction before it commits (%d rows): it was written on the pool", n)
		}
		return nil
	})
	for range 3 {
		if err := deliver(h, orderID); err != nil {
			t.Fatal(err)
		}
	}
	inboxtest.WantRows(t, "invoices of a message delivered 3 times", s.invoices(t, orderID), 1)
	if runs != 1 {
		t.Errorf("the handler ran %d times, want 1", runs)
	}
}

func (s *suite) testFailedHandler(t *testing.T) {
	orderID := testenv.Name("order")
	fail := true
	h := s.handler(t, inbox.Config{Consumer: "billing"}, func(ctx context.Context, order billing.OrderPlaced) error {
		if err := s.Record(ctx, order); err != nil {
			return err
		}
		if fail {
			return errBusiness
		}
		return nil
	})
	if err := deliver(h, orderID); !errors.Is(err, errBusiness) {
		t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
	}
	inboxtest.WantRows(t, "invoices after the failed handler", s.invoices(t, orderID), 0)
	fail = false
	if err := deliver(h, orderID); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	inboxtest.WantRows(t, "invoices after the redelivery", s.invoices(t, orderID), 1)
}

func (s *suite) testNested(t *testing.T) {
	for _, c := range []struct {
		name                string
		nestedFails, fails  bool
		wantOuter, wantNest int
	}{
		{"released, handler succeeds", false, false, 1, 1},
		{"rolled back, handler succeeds", true, false, 1, 0},
		{"released, handler fails", false, true, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			orderID := testenv.Name("order")
			h := s.handler(t, inbox.Config{Consumer: "billing"}, func(ctx context.Context, order billing.OrderPlaced) error {
				if err := s.Record(ctx, order); err != nil {
					return err
				}
				nested := order
				nested.OrderID += "-nested"
				err := s.Nested(ctx, nested, func() error {
					if c.nestedFails {
						return errBusiness
					}
					return nil
				})
				if c.nestedFails && errors.Is(err, errBusiness) {
					err = nil // the handler goes on after the nested transaction rolled back
				}
				if err != nil {
					return err
				}
				if c.fails {
					return errBusiness
				}
				return nil
			})
			if err := deliver(h, orderID); (err != nil) != c.fails {
				t.Fatalf("delivery: %v", err)
			}
			inboxtest.WantRows(t, "invoices of the handler", s.invoices(t, orderID), c.wantOuter)
			inboxtest.WantRows(t, "invoices of the nested transaction", s.invoices(t, orderID+"-nested"), c.wantNest)
		})
	}
}

func (s *suite) testEndTx(t *testing.T) {
	if s.EndTx == nil {
		t.Skip(s.NoEndTx)
	}
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit", false: "rollback"}[commit], func(t *testing.T) {
			orderID := testenv.Name("order")
			end := true
			h := s.handler(t, inbox.Config{Consumer: "billing"}, func(ctx context.Context, order billing.OrderPlaced) error {
				if err := s.Record(ctx, order); err != nil {
					return err
				}
				if end {
					return s.EndTx(ctx, commit)
				}
				return nil
			})
			if err := deliver(h, orderID); !errors.Is(err, inbox.ErrTxEndedByHandler) {
				t.Fatalf("handler ended the transaction: got %v, want %v", err, inbox.ErrTxEndedByHandler)
			}
			want := 0
			if commit {
				want = 1 // committed with the claim: the redelivery is a duplicate
			}
			inboxtest.WantRows(t, "invoices after the nack", s.invoices(t, orderID), want)
			end = false
			if err := deliver(h, orderID); err != nil {
				t.Fatalf("redelivery: %v", err)
			}
			inboxtest.WantRows(t, "invoices after the redelivery", s.invoices(t, orderID), 1)
		})
	}
}

func (s *suite) testWriteBehind(t *testing.T) {
	if s.Queue == nil {
		t.Skip(s.NoQueue)
	}
	orderID := testenv.Name("order")
	fail := true
	h := s.handler(t, inbox.Config{Consumer: "billing", WriteBehind: true}, func(ctx context.Context, order billing.OrderPlaced) error {
		if err := s.Queue(ctx, order); err != nil {
			return err
		}
		if fail {
			return errBusiness
		}
		return nil
	})
	if err := deliver(h, orderID); !errors.Is(err, errBusiness) {
		t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
	}
	inboxtest.WantRows(t, "invoices after the failed handler", s.invoices(t, orderID), 0)
	fail = false
	for range 3 {
		if err := deliver(h, orderID); err != nil {
			t.Fatal(err)
		}
	}
	inboxtest.WantRows(t, "invoices of a message delivered 3 times", s.invoices(t, orderID), 1)
}

// testTrap measures what the documentation warns of: the repository on the pool commits on
// its own, so its invoice survives the failed handler, and every redelivery adds one.
func (s *suite) testTrap(t *testing.T) {
	orderID := testenv.Name("order")
	h := s.handler(t, inbox.Config{Consumer: "billing"}, func(ctx context.Context, order billing.OrderPlaced) error {
		if err := s.RecordOnPool(ctx, order); err != nil {
			return err
		}
		return errBusiness
	})
	for range 2 {
		if err := deliver(h, orderID); !errors.Is(err, errBusiness) {
			t.Fatalf("failing handler: got %v, want %v", err, errBusiness)
		}
	}
	inboxtest.WantRows(t, "invoices written on the pool by 2 failed deliveries", s.invoices(t, orderID), 2)
}

// PostgresURL returns the URL of a new schema of the test database, dropped when the test
// ends: connections made with it create and find tables there (search_path), so the fixed
// table names of generated code (sqlc, ent) never meet another test's.
func PostgresURL(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresURL(t)
	db := open(t, "pgx", base)
	schema := testenv.Name("layer")
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.WithoutCancel(context.Background()), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// MySQLDSN returns the DSN of a new database on the test server, dropped when the test ends.
func MySQLDSN(t *testing.T) string {
	t.Helper()
	base := testenv.MySQLDSN(t)
	db := open(t, "mysql", base)
	name := testenv.Name("layer")
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.WithoutCancel(context.Background()), "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	slash := strings.LastIndex(base, "/")
	rest := base[slash+1:]
	params := ""
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		params = rest[q:]
	}
	return base[:slash+1] + name + params
}

// Open opens a database/sql pool on driver and dsn, closed when the test ends.
func Open(t *testing.T, driver, dsn string) *sql.DB { return open(t, driver, dsn) }

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// InvoicesDDL is the invoice table of the examples whose data layer has no migration of
// its own (sqlc's schema.sql holds the same). No UNIQUE on order_id, on purpose: the inbox
// is what stops a second invoice, so the tests can count rows to prove it.
const InvoicesDDL = `CREATE TABLE invoices (
	id bigserial PRIMARY KEY,
	order_id text NOT NULL,
	amount_cents bigint NOT NULL
)`

// InvoicesDDLMySQL is InvoicesDDL for MySQL and MariaDB.
const InvoicesDDLMySQL = `CREATE TABLE invoices (
	id bigint AUTO_INCREMENT PRIMARY KEY,
	order_id varchar(100) NOT NULL,
	amount_cents bigint NOT NULL
)`

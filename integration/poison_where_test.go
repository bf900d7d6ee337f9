package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A failure is the infrastructure's by where it happened, not by its type: what a handler
// returns from anything but the inbox's own database is the message's, retried a few times and
// poisoned, however much it looks like a database that is away (a net.Error, a connection
// refused, a deadline); what the database raised on the inbox transaction's own session is
// still the infrastructure's.

// elsewhereFailure is a handler's failure met outside the inbox's database, produced for real.
type elsewhereFailure struct {
	name string
	// fail produces the failure in a handler whose message context is ctx; it returns nil
	// where the case does not apply to the backend.
	fail func(t *testing.T, ctx context.Context, b *backend) error
	// is checks that the middleware's error still holds what the handler returned.
	is func(error) bool
}

func elsewhereFailures() []elsewhereFailure {
	var urlErr *url.Error
	var parseErr *net.ParseError
	var addrErr *net.AddrError
	var connectErr *pgconn.ConnectError
	isURL := func(err error) bool { return errors.As(err, &urlErr) }
	return []elsewhereFailure{
		{"a webhook URL that does not parse (*url.Error)", func(*testing.T, context.Context, *backend) error {
			//lint:ignore SA1007 the URL that does not parse is the failure under test
			_, err := url.Parse("http://[::1")
			return fmt.Errorf("notify the webhook: %w", err)
		}, isURL},
		{"a CIDR that does not parse (*net.ParseError)", func(*testing.T, context.Context, *backend) error {
			_, _, err := net.ParseCIDR("10.0.0.0/99")
			return fmt.Errorf("read the allowed network: %w", err)
		}, func(err error) bool { return errors.As(err, &parseErr) }},
		{"an address without a port (*net.AddrError)", func(*testing.T, context.Context, *backend) error {
			_, _, err := net.SplitHostPort("no-port-here")
			return fmt.Errorf("read the partner's address: %w", err)
		}, func(err error) bool { return errors.As(err, &addrErr) }},
		{"an HTTP call to an ftp:// URL (*url.Error)", func(_ *testing.T, ctx context.Context, _ *backend) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "ftp://127.0.0.1/orders", nil)
			if err != nil {
				return err
			}
			_, err = http.DefaultClient.Do(req)
			return fmt.Errorf("post the order: %w", err)
		}, isURL},
		{"an HTTP call refused (a *url.Error over ECONNREFUSED)", func(t *testing.T, ctx context.Context, _ *backend) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(closedPort(t))+"/tax", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				return errors.New("the closed port answered")
			}
			return fmt.Errorf("ask the tax service: %w", err)
		}, func(err error) bool {
			var opErr *net.OpError
			return isURL(err) && errors.As(err, &opErr)
		}},
		{"the handler's own 10 ms sub-timeout (context.DeadlineExceeded)", func(_ *testing.T, ctx context.Context, _ *backend) error {
			sub, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			<-sub.Done()
			return fmt.Errorf("wait for the warehouse: %w", sub.Err())
		}, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{"a connection to a tenant database that was deleted (3D000 in a *pgconn.ConnectError)", func(t *testing.T, ctx context.Context, _ *backend) error {
			conn, err := pgx.Connect(ctx, withDatabase(t, testenv.PostgresURL(t), "tenant_deleted_"+strings.ToLower(watermill.NewShortUUID())))
			if err == nil {
				conn.Close(ctx)
				return errors.New("the deleted database accepted a connection")
			}
			return fmt.Errorf("open the tenant's database: %w", err)
		}, func(err error) bool { return errors.As(err, &connectErr) && pgCode("3D000")(err) }},
	}
}

// withDatabase returns the PostgreSQL URL rawURL with its database replaced.
func withDatabase(t *testing.T, rawURL, database string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + database
	return u.String()
}

// On every store, in both modes: each failure a handler meets outside the inbox's database is
// poisonous, and the middleware's error still holds it.
func TestHandlerFailuresElsewhereArePoison(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		t.Run(map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) {
				for _, f := range elsewhereFailures() {
					t.Run(f.name, func(t *testing.T) {
						mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
						if err != nil {
							t.Fatal(err)
						}
						_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
							if !writeBehind {
								// A statement on the inbox transaction first: the session is in use.
								tx, ok := b.inTx(msg.Context())
								if !ok {
									return nil, errors.New("no inbox transaction in the handler's context")
								}
								if err := tx.exec(msg.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
									return nil, err
								}
							}
							return nil, f.fail(t, msg.Context(), b)
						})(newOrder())
						switch {
						case err == nil:
							t.Fatal("the delivery succeeded")
						case !f.is(err):
							t.Fatalf("the middleware's error %v does not hold the handler's", err)
						case !inbox.Poisonous(err):
							t.Errorf("Poisonous(%v) = false: the recommended stack would retry this message for ever", err)
						}
						t.Logf("%v", err)
					})
				}
			})
		})
	}
}

// A statement with two placeholders and one argument in QueryExecModeExec, the mode behind
// PgBouncer: the server refuses its Bind with 08P01 (protocol_violation), of class 08
// "connection exception", on a connection that goes on working. Sent by the handler on the
// inbox transaction (NewPgx and NewPgxPipeline in the claim-first mode) or queued
// (write-behind mode, the pipeline's own request included): the message's, poisoned.
func TestProtocolViolationInExecModeIsPoison(t *testing.T) {
	for _, store := range []struct {
		name string
		new  func(pool *pgxpool.Pool, config sqlinbox.Config) (*sqlinbox.Store, error)
	}{
		{"NewPgx", sqlinbox.NewPgx},
		{"NewPgxPipeline", func(pool *pgxpool.Pool, config sqlinbox.Config) (*sqlinbox.Store, error) {
			return sqlinbox.NewPgxPipeline(pool, config, sqlinbox.PipelineConfig{})
		}},
	} {
		for _, writeBehind := range []bool{false, true} {
			t.Run(store.name+"/"+map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
				var err error
				pool := openPgxPool(t, testenv.PostgresURL(t), func(c *pgxpool.Config) {
					c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
				})
				s := pgxTransientStore(t, pool, sqlinbox.Config{})
				if s.store, err = store.new(pool, sqlinbox.Config{Table: s.table}); err != nil {
					t.Fatal(err)
				}
				direct := pgxRunner{pool}
				business := testenv.Name("invoices")
				mustExec(t, direct, "CREATE TABLE "+business+" (consumer text NOT NULL, msg_key text NOT NULL)")
				t.Cleanup(func() { _ = direct.exec(context.Background(), "DROP TABLE IF EXISTS "+business) })
				insert := "INSERT INTO " + business + " (consumer, msg_key) VALUES ($1, $2)"
				mw, err := inbox.NewMiddleware(s.store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
					if writeBehind {
						return nil, inbox.ExecAtCommit(msg.Context(), insert, "billing")
					}
					tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
					if !ok {
						return nil, errors.New("no inbox transaction in the handler's context")
					}
					_, err := tx.Exec(msg.Context(), insert, "billing")
					return nil, err
				})(newOrder())
				switch {
				case err == nil:
					t.Fatal("a statement with a missing argument was acked")
				case !pgCode("08P01")(err):
					t.Fatalf("the delivery failed with %v, want the server's 08P01", err)
				case !inbox.Poisonous(err):
					t.Errorf("Poisonous(%v) = false: the recommended stack would retry this message for ever", err)
				}
				if n, err := direct.count(context.Background(), "SELECT count(*) FROM "+s.table); err != nil || n != 0 {
					t.Errorf("%d claims (%v), want none", n, err)
				}
				t.Logf("%v", err)
			})
		}
	}
}

// The inbox session's connection lost while the handler runs (its backend ended by the
// server, as a failover or an administrator does): the handler's next statement on the inbox
// transaction fails, and that failure is the infrastructure's, on PostgreSQL through pgx and
// database/sql and on MariaDB. A deadlock on the inbox transaction stays the infrastructure's
// too (TestTransientFailuresAreNotPoison); one that a pgx handler met on another pool is the
// message's.
func TestInboxSessionLostIsNotPoison(t *testing.T) {
	ctx := context.Background()
	for _, db := range []struct {
		name      string
		backend   func(t *testing.T) *backend
		pid, kill string // kill ends the session of the backend whose id is %d
	}{
		{"pgx/postgres", pgxBackend, "SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)"},
		{"database-sql/postgres", stdlibPostgresBackend, "SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)"},
		{"database-sql/mariadb", mysqlBackend, "SELECT CONNECTION_ID()", "KILL CONNECTION %d"},
		{"database-sql/mariadb/multi-statements", backends["database-sql/mariadb/multi-statements"], "SELECT CONNECTION_ID()", "KILL CONNECTION %d"},
		// The connection cut between the store and the server (the backends' proxy): the
		// session sees its connection close, with no word from the server.
		{"pgx/postgres, connection cut", pgxBackend, "", ""},
		{"database-sql/mariadb, connection cut", mysqlBackend, "", ""},
	} {
		t.Run(db.name, func(t *testing.T) {
			b := db.backend(t)
			mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
				tx, ok := b.inTx(msg.Context())
				if !ok {
					return nil, errors.New("no inbox transaction in the handler's context")
				}
				if db.kill == "" {
					defer b.outage()()
				} else {
					pid, err := tx.count(msg.Context(), db.pid)
					if err != nil {
						return nil, err
					}
					if err := b.direct.exec(ctx, fmt.Sprintf(db.kill, pid)); err != nil {
						return nil, fmt.Errorf("end the inbox session's backend: %w", err)
					}
				}
				if err := tx.exec(msg.Context(), "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID); err != nil {
					return nil, fmt.Errorf("insert the invoice: %w", err)
				}
				return nil, errors.New("the insert went through on a session the server ended")
			})(newOrder())
			switch {
			case err == nil:
				t.Fatal("the delivery succeeded")
			case inbox.Poisonous(err):
				t.Errorf("Poisonous(%v) = true: the inbox's own session lost would poison the message", err)
			}
			t.Logf("%v", err)
		})
	}
}

// A pgx handler that meets a deadlock on a pool of its own, not on the inbox transaction: the
// message's. The same deadlock on the inbox transaction is the infrastructure's
// (TestTransientFailuresAreNotPoison).
func TestPgxDeadlockElsewhereIsPoison(t *testing.T) {
	s, direct := transientDBs[0].open(t, sqlinbox.Config{})
	locks := lockRows(t, direct)
	other := openPgxPool(t, testenv.PostgresURL(t))
	ctx := context.Background()
	// The handler's own transaction on another pool locks row 1 and asks for row 2, which a
	// transaction of the test holds while it asks for row 1.
	mine, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mine.Rollback(ctx) }()
	theirs, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = theirs.Rollback(ctx) }()
	if _, err := mine.Exec(ctx, "UPDATE "+locks+" SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Exec(ctx, "UPDATE "+locks+" SET n = n + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	theirsDone := make(chan error, 1)
	err = s.deliver(t, newOrder(), func(msg *message.Message, _ runner) error {
		go func() {
			// Waits for row 1, which mine holds, until the deadlock detector ends one of them.
			_, err := theirs.Exec(ctx, "UPDATE "+locks+" SET n = n + 1 WHERE id = 1")
			theirsDone <- err
		}()
		_, err := mine.Exec(msg.Context(), "UPDATE "+locks+" SET n = n + 1 WHERE id = 2")
		if theirsErr := <-theirsDone; err == nil {
			err = theirsErr
		}
		return err
	})
	if !pgCode("40P01")(err) {
		t.Fatalf("the delivery failed with %v, want a deadlock", err)
	}
	if !inbox.Poisonous(err) {
		t.Errorf("Poisonous(%v) = false: a deadlock on another pool's transaction is not the inbox's", err)
	}
}

// On RabbitMQ, one consumer, the recommended stack with its poison queue: one order whose
// webhook URL does not parse, published ahead of 10 good ones. It is poisoned after its
// retries, and the 10 behind it are invoiced once each.
func TestBadWebhookAheadOfGoodOrdersIsPoisoned(t *testing.T) {
	t.Parallel()
	broker := pacedBrokers[1]
	broker.handlers = 1 // one consumer: a message retried for ever would hold every one behind it
	r := startPacedRun(t, postgresDB(t, testenv.PostgresURL(t)), broker, "")
	bad := message.NewMessage(watermill.NewUUID(), []byte(`{"order":"with a bad webhook"}`))
	bad.Metadata.Set("webhook", "http://[::1")
	msgs := []*message.Message{bad}
	for range 10 {
		order := watermill.NewUUID()
		msgs = append(msgs, message.NewMessage(order, fmt.Appendf(nil, `{"order":%q}`, order)))
	}
	r.publish(t, msgs...)
	// Either the bad order is poisoned or it has been tried more often than its retries allow:
	// the old classification retried it for ever, and fails here within a second.
	waitFor(t, "the bad order poisoned or over its retries", func() bool {
		return len(r.poison.poisoned()) > 0 || r.attemptsOf(bad.UUID) > 1+poisonRetries
	})
	if got := r.attemptsOf(bad.UUID); got > 1+poisonRetries {
		t.Fatalf("the bad order was tried %d times, more than its %d retries: it holds the queue", got, poisonRetries)
	}
	r.waitAcked(t, 1+10, time.Now().Add(30*time.Second)) // the poisoned one is acked too, by PoisonQueue
	r.stop()
	poisoned := r.poison.poisoned()
	if len(poisoned) != 1 || poisoned[0].UUID != bad.UUID {
		t.Fatalf("%d messages poisoned, want only the bad order", len(poisoned))
	}
	if reason := poisoned[0].Metadata.Get(middleware.ReasonForPoisonedKey); !strings.Contains(reason, "notify the order's webhook") {
		t.Errorf("poisoned with %q, want the webhook's error", reason)
	}
	if got := r.attemptsOf(bad.UUID); got != 1+poisonRetries {
		t.Errorf("the bad order was tried %d times, want %d", got, 1+poisonRetries)
	}
	r.checkInvoices(t, 10)
}

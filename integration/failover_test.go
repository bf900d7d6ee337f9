package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// failoverStore opens one consumer instance's store on a PostgreSQL URL, and says how its
// handlers reach the inbox transaction.
type failoverStore struct {
	name string
	open func(t *testing.T, url, table string) (store inbox.Store, inTx func(ctx context.Context) (runner, bool))
	// writeBehind runs the inbox in write-behind mode: the handler queues its invoice.
	writeBehind bool
}

var failoverStores = []failoverStore{
	{"pgx", func(t *testing.T, url, table string) (inbox.Store, func(ctx context.Context) (runner, bool)) {
		store, err := sqlinbox.NewPgx(openPgxPool(t, url), sqlinbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		return store, func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			return pgxRunner{tx}, ok
		}
	}, false},
	{"database-sql", func(t *testing.T, url, table string) (inbox.Store, func(ctx context.Context) (runner, bool)) {
		store, err := sqlinbox.NewDB(openSQL(t, "pgx", url), sqlinbox.Postgres{}, sqlinbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		return store, func(ctx context.Context) (runner, bool) {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			return sqlRunner{tx, true}, ok
		}
	}, false},
}

// A PostgreSQL failover in the middle of the traffic: a primary with one streaming standby,
// synchronous and asynchronous, and two consumer instances whose stores (pgx on pgxpool, and
// database/sql on pgx's stdlib) reach the pair through one multi-host URL with
// target_session_attrs=read-write. 400 orders arrive as 1-3 copies, delivered at once to both
// instances; once a third are acked the primary is stopped at once (as in a crash) and the
// standby promoted. The pools find the new primary by themselves; every delivery that failed
// meanwhile is redelivered. Exactly once: one claim and one invoice per order, and never an ack
// before both were committed. The time from the stop until the first ack on the new primary is
// logged.
//
// Asynchronous replication has a window: commits the primary acknowledged but had not yet
// sent to the standby are lost with it, their claims with their invoices, after the broker got
// its acks. The failover counts those commit records in the old primary's WAL; when it finds
// none, which is what a clean stop on one host gives, the run must be exactly once too, and
// when it finds some, orders lost must not outnumber them and nothing may be doubled.
func TestPostgresFailoverExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, synchronous := range []bool{true, false} {
		replication := "async"
		if synchronous {
			replication = "sync"
		}
		for _, s := range failoverStores {
			t.Run(replication+"/"+s.name, func(t *testing.T) {
				r := testenv.NewPostgresReplica(t, synchronous)
				runFailover(t, r, r.URL, s, func(ctx context.Context) (testenv.Failover, error) { return r.Failover(ctx) })
			})
		}
	}
}

// runFailover runs the traffic of TestPostgresFailoverExactlyOnce on stores that reach r at
// storeURL, calling failover once a third of the orders are acked.
func runFailover(t *testing.T, r *testenv.PostgresReplica, storeURL string, s failoverStore,
	failover func(ctx context.Context) (testenv.Failover, error),
) {
	const orders, maxCopies, workers, instances = 400, 3, 8, 2
	ctx := context.Background()
	began := time.Now()
	table, business := testenv.Name("inbox"), testenv.Name("invoices")
	// The test's own reads follow the primary through the multi-host URL too.
	direct := pgxRunner{openPgxPool(t, r.URL)}
	mustExec(t, direct, "CREATE TABLE "+business+" (consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")

	run := &trafficRun{}
	var handlers []message.HandlerFunc
	for range instances {
		store, inTx := s.open(t, storeURL, table)
		if err := store.(interface{ InitializeSchema(context.Context) error }).InitializeSchema(ctx); err != nil {
			t.Fatal(err)
		}
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: s.writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			run.runs.Add(1)
			if s.writeBehind {
				return nil, inbox.ExecAtCommit(msg.Context(), "INSERT INTO "+business+" (consumer, msg_key) VALUES ($1, $2)", "billing", msg.UUID)
			}
			tx, ok := inTx(msg.Context())
			if !ok {
				return nil, errors.New("no inbox transaction in the handler's context")
			}
			return nil, tx.exec(msg.Context(), "INSERT INTO "+business+" (consumer, msg_key) VALUES (?, ?)", "billing", msg.UUID)
		})
		handlers = append(handlers, run.checkingAcks(h, func(ctx context.Context, key string) (claims, invoices int, err error) {
			claims, cErr := direct.count(ctx, "SELECT COUNT(*) FROM "+table+" WHERE consumer = ? AND message_id = ?", "billing", key)
			invoices, iErr := direct.count(ctx, "SELECT COUNT(*) FROM "+business+" WHERE msg_key = ?", key)
			return claims, invoices, errors.Join(cErr, iErr)
		}))
	}

	keys, copies, total := newOrders(orders, maxCopies)
	var once sync.Once
	done := make(chan struct{})
	var f testenv.Failover
	var failoverErr error
	run.deliverCopies(t, handlers, keys, copies, workers, func(acked int) {
		if acked < orders/3 {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				f, failoverErr = failover(ctx)
			}()
		})
	})
	<-done
	if failoverErr != nil {
		t.Fatalf("failover: %v", failoverErr)
	}

	rows := func(query string) int {
		t.Helper()
		n, err := direct.count(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	claims, invoices := rows("SELECT COUNT(*) FROM "+table), rows("SELECT COUNT(*) FROM "+business)
	wantRows(t, "orders invoiced more than once", rows("SELECT COUNT(*) FROM (SELECT msg_key FROM "+business+" GROUP BY msg_key HAVING COUNT(*) > 1) d"), 0)
	wantRows(t, "claims without an invoice", rows("SELECT COUNT(*) FROM "+table+" i LEFT JOIN "+business+" b ON b.msg_key = i.message_id WHERE b.msg_key IS NULL"), 0)
	wantRows(t, "invoices without a claim", rows("SELECT COUNT(*) FROM "+business+" b LEFT JOIN "+table+" i ON i.message_id = b.msg_key WHERE i.message_id IS NULL"), 0)
	lost := orders - claims
	if r.Synchronous || f.Unreplicated == 0 {
		wantRows(t, "claims", claims, orders)
		wantRows(t, "invoices", invoices, orders)
		if bad := run.firstBadAck.Load(); bad != nil {
			t.Errorf("%d acks without the claim and one invoice committed; the first: %v", run.badAcks.Load(), *bad)
		}
	} else if lost > f.Unreplicated || int(run.badAcks.Load()) > f.Unreplicated {
		t.Errorf("%d orders lost and %d acks without their claim and invoice, more than the %d commits the standby had not received",
			lost, run.badAcks.Load(), f.Unreplicated)
	}

	resumed := run.firstAckAfter(f.Promoted)
	report(t, fmt.Sprintf("PostgreSQL failover %s: %d orders, %d copies, 2 instances; primary stopped after %d orders, standby promoted in %.2fs, "+
		"first ack on the new primary %.2fs after the stop; %d nacks redelivered (at most %d for one copy), %d handler runs; %d claims, %d invoices; "+
		"%d commit records the standby had not received, %d acked orders lost (%.1fs in all, %.1fs to start the pair)",
		t.Name(), orders, total, orders/3, f.Promoted.Sub(f.Stopped).Seconds(), resumed.Sub(f.Stopped).Seconds(),
		len(run.nacks), run.maxNacks, run.runs.Load(), claims, invoices, f.Unreplicated, lost, time.Since(began).Seconds(), r.Took.Seconds()))
	if resumed.IsZero() {
		t.Error("no ack after the failover")
	}
}

// The failover through PgBouncer (transaction mode, 4 server connections) in front of the
// primary, as many deployments reach PostgreSQL: the consumers know only the pooler's address,
// and after the failover the pooler is pointed at the promoted standby (its configuration
// rewritten and reloaded, as a failover manager's hook does). The pgx store in exec mode, as
// docs/pooler.md says; synchronous replication. Exactly once.
func TestPostgresFailoverThroughPgBouncer(t *testing.T) {
	t.Parallel()
	r := testenv.NewPostgresReplica(t, true)
	bouncer := testenv.NewPgBouncer(t, r.Primary.URL(), poolerServerConns)
	storeURL := withQuery(t, bouncer.URL, "default_query_exec_mode", "exec")
	runFailover(t, r, storeURL, failoverStores[0], func(ctx context.Context) (testenv.Failover, error) {
		f, err := r.Failover(ctx)
		if err != nil {
			return f, err
		}
		return f, bouncer.Retarget(r.Standby.URL())
	})
}

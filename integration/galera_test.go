package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The tests of a MariaDB Galera cluster: 3 nodes of the package's shared cluster
// (testenv.SharedGalera), every one a primary, with a consumer's stores on different nodes,
// as a consumer group spread over several machines would have them.

// TestGalera runs the cluster's cases one after another, since some kill or cut a node that
// no other case may be using, and beside the package's other parallel tests, since they wait
// on the cluster far more than they compute.
func TestGalera(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"CopiesStormExactlyOnce", galeraCopiesStormExactlyOnce},
		{"MultiStatementsHotRowIsRefusedOrExactlyOnce", galeraMultiStatementsHotRowIsRefusedOrExactlyOnce},
		{"RefusesMultiStatements", galeraRefusesMultiStatements},
		{"NodeKilledMidTrafficExactlyOnce", galeraNodeKilledMidTrafficExactlyOnce},
		{"NodeNotSyncedIsARetriableNack", galeraNodeNotSyncedIsARetriableNack},
		{"NodeNotReadyIsNotPoison", galeraNodeNotReadyIsNotPoison},
	} {
		t.Run(c.name, c.run)
	}
}

// galeraMode is one way a consumer can run the inbox on MySQL.
type galeraMode struct {
	name string
	// writeBehind runs the handler before the claim; queue makes a claim-first handler queue
	// its writes (inbox.ExecAtCommit) instead of writing through the *sql.Tx.
	writeBehind, queue bool
	// multiStatement makes the store with sqlinbox.NewMultiStatement (and the DSN's
	// multiStatements); coalesced with sqlinbox.NewMultiStatementCoalesced.
	multiStatement, coalesced bool
}

// galeraModes are the modes the library allows on a Galera node: each sends one statement
// at a time.
var galeraModes = []galeraMode{
	{name: "claim-first"},
	{name: "claim-first/queued", queue: true},
	{name: "write-behind", writeBehind: true},
}

// galeraMultiStatementModes are the modes of a multi-statement store, which a Galera node
// refuses, with the name the refusal gives each.
var galeraMultiStatementModes = []struct {
	galeraMode
	refusal string
}{
	{galeraMode{name: "write-behind/multi-statement", writeBehind: true, multiStatement: true},
		"write-behind mode on a multi-statement store"},
	{galeraMode{name: "claim-first/multi-statement", multiStatement: true},
		"the claim-first mode on a multi-statement store"},
	{galeraMode{name: "claim-first/multi-statement/queued", multiStatement: true, queue: true},
		"the claim-first mode on a multi-statement store"},
	{galeraMode{name: "write-behind/coalesced", writeBehind: true, multiStatement: true, coalesced: true},
		"write-behind mode on a multi-statement store"},
}

// galeraTables is one test's inbox table, invoice table and counter row on the cluster.
type galeraTables struct {
	g                        *testenv.Galera
	table, business, counter string
	// direct reads through node 1, after every write-set the cluster committed before the
	// read (wsrep_sync_wait = 1).
	direct runner
}

// newGaleraTables creates the tables with InitializeSchema run on every node at once, as
// every instance of a consumer group does at start, and drops them when t ends.
func newGaleraTables(t *testing.T) *galeraTables {
	t.Helper()
	g := testenv.SharedGalera(t)
	c := &galeraTables{
		g:        g,
		table:    testenv.Name("inbox"),
		business: testenv.Name("invoices"),
		counter:  testenv.Name("counter"),
		direct:   sqlRunner{q: openSQL(t, "mysql", g.Nodes[0].DSN("parseTime=true&interpolateParams=true&wsrep_sync_wait=1"))},
	}
	ctx := context.Background()
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, table := range []string{c.table, c.business, c.counter} {
			_ = c.direct.exec(ctx, "DROP TABLE IF EXISTS "+table)
		}
	})
	errs := make([]error, len(g.Nodes))
	var wg sync.WaitGroup
	for i := range g.Nodes {
		store := c.store(t, i, galeraMode{}, nil)
		wg.Go(func() { errs[i] = store.InitializeSchema(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("InitializeSchema on every node at once: %v", err)
	}
	// An invoice per run of the handler: no unique key but the row's own, so that a message
	// processed twice shows up as two rows (Galera wants a primary key on every table).
	mustExec(t, c.direct, "CREATE TABLE "+c.business+
		" (id BIGINT AUTO_INCREMENT PRIMARY KEY, consumer VARCHAR(255) NOT NULL, msg_key VARCHAR(255) NOT NULL)")
	mustExec(t, c.direct, "CREATE TABLE "+c.counter+" (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(t, c.direct, "INSERT INTO "+c.counter+" (id, n) VALUES (1, 0)")
	return c
}

// store returns a store of the inbox table on node (0-based) in mode m, on a pool of its own.
func (c *galeraTables) store(t *testing.T, node int, m galeraMode, logger watermill.LoggerAdapter) galeraStore {
	t.Helper()
	params := "parseTime=true&interpolateParams=true"
	config := sqlinbox.Config{Table: c.table, Logger: logger}
	if !m.multiStatement {
		store, err := sqlinbox.NewDB(openSQL(t, "mysql", c.g.Nodes[node].DSN(params)), sqlinbox.MySQL{}, config)
		if err != nil {
			t.Fatal(err)
		}
		return store
	}
	connector := mysqlConnector(t, c.g.Nodes[node].DSN(params+"&multiStatements=true"))
	var store *sqlinbox.Store
	var db *sql.DB
	var err error
	if m.coalesced {
		store, db, err = sqlinbox.NewMultiStatementCoalesced(connector, sqlinbox.MySQL{}, config, sqlinbox.PipelineConfig{})
	} else {
		store, db, err = sqlinbox.NewMultiStatement(connector, sqlinbox.MySQL{}, config)
	}
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	return store
}

// galeraStore is a store made by NewDB or NewMultiStatement.
type galeraStore interface {
	inbox.Store
	InitializeSchema(ctx context.Context) error
}

// handler returns the inbox-wrapped billing handler of store in mode m: it writes one invoice
// and, with hot, adds 1 to the counter row that every message updates. Each ack is checked: the
// order's claim and one invoice must be committed, seen from node 1.
func (c *galeraTables) handler(t *testing.T, store galeraStore, m galeraMode, hot bool, run *trafficRun) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: m.writeBehind}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + c.business + " (consumer, msg_key) VALUES (?, ?)"
	increment := "UPDATE " + c.counter + " SET n = n + 1 WHERE id = 1"
	h := mw(func(msg *message.Message) ([]*message.Message, error) {
		run.runs.Add(1)
		ctx := msg.Context()
		if m.writeBehind || m.queue {
			if hot {
				if err := inbox.ExecAtCommit(ctx, increment); err != nil {
					return nil, err
				}
			}
			return nil, inbox.ExecAtCommit(ctx, insert, "billing", msg.UUID)
		}
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		if !ok {
			return nil, errors.New("no *sql.Tx in the handler's context")
		}
		if hot {
			if _, err := tx.ExecContext(ctx, increment); err != nil {
				return nil, err
			}
		}
		_, err := tx.ExecContext(ctx, insert, "billing", msg.UUID)
		return nil, err
	})
	return run.checkingAcks(h, func(ctx context.Context, key string) (claims, invoices int, err error) {
		claims, cErr := c.direct.count(ctx, "SELECT COUNT(*) FROM "+c.table+" WHERE consumer = ? AND message_id = ?", "billing", key)
		invoices, iErr := c.direct.count(ctx, "SELECT COUNT(*) FROM "+c.business+" WHERE msg_key = ?", key)
		return claims, invoices, errors.Join(cErr, iErr)
	})
}

// nackCounts counts the run's nacks by the server's error number (0: not a server error).
func (run *trafficRun) nackCounts() map[uint16]int {
	run.mu.Lock()
	defer run.mu.Unlock()
	counts := map[uint16]int{}
	for _, err := range run.nacks {
		counts[mysqlErrorNumber(err)]++
	}
	return counts
}

// mysqlErrorNumber is the number of the server error err holds, 0 if none.
func mysqlErrorNumber(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

// The server's errors that a redelivery fixes on Galera: a deadlock, which is also how a
// certification conflict with another node's write-set is reported, and a lock wait timeout.
const (
	errDeadlock        = 1213
	errLockWaitTimeout = 1205
	errNodeNotReady    = 1047 // WSREP has not yet prepared node for application use
)

// checkExactlyOnce fails t unless every key has one claim and one invoice and no ack came
// before its claim and invoice were committed.
func (c *galeraTables) checkExactlyOnce(t *testing.T, run *trafficRun, keys int) {
	t.Helper()
	wantRows(t, "invoices", c.rows(t, c.business, ""), keys)
	wantRows(t, "distinct orders invoiced", c.rows(t, "(SELECT DISTINCT msg_key FROM "+c.business+") d", ""), keys)
	wantRows(t, "orders invoiced more than once", c.rows(t, "(SELECT msg_key FROM "+c.business+" GROUP BY msg_key HAVING COUNT(*) > 1) d", ""), 0)
	wantRows(t, "claims", c.rows(t, c.table, ""), keys)
	if bad := run.firstBadAck.Load(); bad != nil {
		t.Errorf("%d acks without the claim and one invoice committed; the first: %v", run.badAcks.Load(), *bad)
	}
}

func (c *galeraTables) rows(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	n, err := c.direct.count(context.Background(), "SELECT COUNT(*) FROM "+table+" "+where, args...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// counterValue reads the hot counter row.
func (c *galeraTables) counterValue(t *testing.T) int {
	t.Helper()
	n, err := c.direct.count(context.Background(), "SELECT n FROM "+c.counter+" WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The copies storm: 600 orders, each published 1-4 times, every copy of an order delivered at
// the same moment to a store on another node, in every mode the library allows on Galera.
// Concurrent claims of one key on two nodes conflict at certification: the loser fails with
// error 1213 (deadlock), is nacked and redelivered, and finds the claim committed. Exactly one
// invoice and one claim per order; every ack after its claim and invoice were committed; every
// nack a 1213 (or a lock wait timeout).
func galeraCopiesStormExactlyOnce(t *testing.T) {
	const orders, maxCopies, workers = 600, 4, 8
	for _, m := range galeraModes {
		t.Run(m.name, func(t *testing.T) {
			began := time.Now()
			c := newGaleraTables(t)
			run := &trafficRun{}
			var handlers []message.HandlerFunc
			for node := range c.g.Nodes {
				handlers = append(handlers, c.handler(t, c.store(t, node, m, nil), m, false, run))
			}
			keys, copies, total := newOrders(orders, maxCopies)
			run.deliverCopies(t, handlers, keys, copies, workers, nil)

			c.checkExactlyOnce(t, run, orders)
			counts := run.nackCounts()
			for number, n := range counts {
				if number != errDeadlock && number != errLockWaitTimeout {
					run.mu.Lock()
					t.Errorf("%d nacks with error %d, which no redelivery should need; the nacks: %v", n, number, run.nacks)
					run.mu.Unlock()
				}
			}
			if counts[errDeadlock] == 0 {
				t.Errorf("no copy conflicted with another node's (error 1213): the storm tested nothing")
			}
			report(t, fmt.Sprintf("Galera storm %s: %d orders, %d copies on 3 nodes, %d handler runs; nacks: %d deadlocks (1213), %d lock wait timeouts (1205), all redelivered, at most %d for one copy; %d invoices; %.1fs",
				m.name, orders, total, run.runs.Load(), counts[errDeadlock], counts[errLockWaitTimeout], run.maxNacks,
				c.rows(t, c.business, ""), time.Since(began).Seconds()))
		})
	}
}

// A node SIGKILLed in the middle of the traffic, then restarted (it rejoins by IST), in every
// mode the library allows on Galera: 300 orders, 1-3 copies each, on stores on the 3 nodes.
// The deliveries on the killed node fail until it is back (connection refused, a COMMIT whose
// outcome never came back, "not yet prepared" while it rejoins) and are redelivered; the
// others stall until the cluster has dropped the node. Exactly once, and no ack before its
// claim and invoice were committed.
func galeraNodeKilledMidTrafficExactlyOnce(t *testing.T) {
	const orders, maxCopies, workers = 300, 3, 8
	for _, m := range galeraModes {
		t.Run(m.name, func(t *testing.T) {
			began := time.Now()
			c := newGaleraTables(t)
			t.Cleanup(func() {
				if err := c.g.Repair(); err != nil {
					t.Errorf("repair the cluster: %v", err)
				}
			})
			run := &trafficRun{}
			var handlers []message.HandlerFunc
			for node := range c.g.Nodes {
				handlers = append(handlers, c.handler(t, c.store(t, node, m, nil), m, false, run))
			}
			keys, copies, total := newOrders(orders, maxCopies)
			victim := c.g.Nodes[1]
			var killed, rejoined time.Duration
			var killedAt time.Time
			restarted := make(chan error, 1)
			var once sync.Once
			run.deliverCopies(t, handlers, keys, copies, workers, func(done int) {
				if done < orders/3 {
					return
				}
				once.Do(func() {
					killedAt = time.Now()
					victim.Kill()
					killed = time.Since(began)
					go func() {
						err := victim.Restart()
						rejoined = time.Since(killedAt)
						restarted <- err
					}()
				})
			})
			if err := <-restarted; err != nil {
				t.Fatalf("restart %s: %v", victim.Name, err)
			}

			c.checkExactlyOnce(t, run, orders)
			counts := run.nackCounts()
			report(t, fmt.Sprintf("Galera kill %s: %d orders, %d copies; %s killed at %.1fs with %d orders done, synced again %.1fs later, "+
				"longest time without an ack after the kill %.1fs; nacks by server error (0: connection): %v, at most %d for one copy; %d invoices (%.1fs)",
				m.name, orders, total, victim.Name, killed.Seconds(), orders/3, rejoined.Seconds(),
				run.longestWait(killedAt).Seconds(), counts, run.maxNacks, c.rows(t, c.business, ""), time.Since(began).Seconds()))
		})
	}
}

// A node that is not synced, here one cut off from the other two (they are paused, so it is
// left in a non-primary component), answers every transaction with error 1047 (WSREP has not
// yet prepared node for application use): each message on it is a nack, never an ack and
// never a verdict the store keeps. A store whose table check passed before the cut and a
// store made during it (its table check cannot run) both process their messages at the first
// delivery once the node is back, by themselves.
func galeraNodeNotSyncedIsARetriableNack(t *testing.T) {
	c := newGaleraTables(t)
	node := c.g.Nodes[2]
	t.Cleanup(func() {
		if err := c.g.Repair(); err != nil {
			t.Errorf("repair the cluster: %v", err)
		}
	})
	run := &trafficRun{}
	m := galeraMode{}
	before := c.handler(t, c.store(t, 2, m, nil), m, false, run)
	if err := deliver(context.Background(), before, watermill.NewUUID()); err != nil {
		t.Fatal(err)
	}

	cutAt := time.Now()
	for _, other := range c.g.Nodes[:2] {
		if err := other.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := node.Status()
		if err != nil {
			t.Fatal(err)
		}
		if s["wsrep_cluster_status"] != "Primary" {
			t.Logf("%s %s after %.1fs", node.Name, s["wsrep_cluster_status"], time.Since(cutAt).Seconds())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still primary a minute after the others were paused", node.Name)
		}
		time.Sleep(50 * time.Millisecond) // polling the node's state
	}
	during := c.handler(t, c.store(t, 2, m, nil), m, false, run)
	keys := map[string]message.HandlerFunc{watermill.NewUUID(): before, watermill.NewUUID(): during}
	for key, h := range keys {
		for range 3 {
			err := deliver(context.Background(), h, key)
			if mysqlErrorNumber(err) != errNodeNotReady || errors.Is(err, sqlinbox.ErrTableMismatch) {
				t.Fatalf("a delivery on a node in a non-primary component: %v, want error 1047", err)
			}
		}
	}

	resumedAt := time.Now()
	if err := c.g.Repair(); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster whole again %.1fs after the others resumed", time.Since(resumedAt).Seconds())
	for key, h := range keys {
		if err := deliver(context.Background(), h, key); err != nil {
			t.Errorf("first delivery once the node is back: %v", err)
		}
	}
	c.checkExactlyOnce(t, run, 3)
}

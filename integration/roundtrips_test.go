package integration

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// countingConn counts the writes pgx makes: pgx writes a request, or a pipelined batch,
// with one write, so writes are round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// The round trips docs/write-behind.md promises on pgx: a first delivery costs the claim's batch, the
// handler's statement and COMMIT; with inbox.ExecAtCommit, the claim's batch and the commit's; a
// duplicate, the claim's batch and the ROLLBACK. In write-behind mode a first delivery costs
// one batch, and a duplicate that batch and one with ROLLBACK and the read of the record.
//
// The same in every query execution mode the pool may have: in the modes that keep no
// statement on the server (exec, simple protocol, describe-exec) the store prepares
// nothing, and a batch still travels as one. Describe-exec is the exception pgx makes for
// every statement with parameters, the store's and the handler's alike: it describes each
// batch and each such statement first, a round trip more (a COMMIT or ROLLBACK alone is
// one), and after a write-behind duplicate it sends ROLLBACK, then the read of the record.
func TestPgxRoundTripsPerMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"cache-statement", pgx.QueryExecModeCacheStatement},
		{"cache-describe", pgx.QueryExecModeCacheDescribe},
		{"exec", pgx.QueryExecModeExec},
		{"simple-protocol", pgx.QueryExecModeSimpleProtocol},
		{"describe-exec", pgx.QueryExecModeDescribeExec},
	} {
		t.Run(tc.name, func(t *testing.T) { pgxRoundTripsPerMessage(t, tc.mode) })
	}
}

func pgxRoundTripsPerMessage(t *testing.T, mode pgx.QueryExecMode) {
	ctx := context.Background()
	var writes atomic.Int64
	pool := openPgxPool(t, testenv.PostgresURL(t), func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = mode
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingConn{conn, &writes}, err
		}
	})
	b := pgxBackend(t)
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES ($1, $2)"
	withTimeout, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: b.table, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeoutMW, err := inbox.NewMiddleware(withTimeout, inbox.Config{Consumer: "billing"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeInTx := func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext[pgx.Tx](msg.Context())
		_, err := tx.Exec(msg.Context(), insert, "billing", msg.UUID)
		return nil, err
	}
	writeBehind := func(store inbox.Store) message.HandlerFunc {
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return mw(func(msg *message.Message) ([]*message.Message, error) {
			return nil, inbox.ExecAtCommit(msg.Context(), insert, "billing", msg.UUID)
		})
	}
	plain := mw(writeInTx)
	queued := mw(func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.ExecAtCommit(msg.Context(), insert, "billing", msg.UUID)
	})

	const messages = 50
	perMessage := func(h message.HandlerFunc, keys func(i int) string) float64 {
		// Steady state: a first delivery, a duplicate and another first delivery pay what a
		// connection pays once (preparing the statements; dropping pgx's cached copy of a text
		// that another handler shape used and the write-behind path now prepares by name).
		warmUp := watermill.NewUUID()
		for _, key := range []string{warmUp, warmUp, watermill.NewUUID()} {
			if err := deliver(ctx, h, key); err != nil {
				t.Fatal(err)
			}
		}
		before := writes.Load()
		for i := range messages {
			if err := deliver(ctx, h, keys(i)); err != nil {
				t.Fatal(err)
			}
		}
		return float64(writes.Load()-before) / messages
	}
	var firsts, wbFirsts []string
	for range messages {
		firsts = append(firsts, watermill.NewUUID())
		wbFirsts = append(wbFirsts, watermill.NewUUID())
	}
	for _, tc := range []struct {
		name string
		h    message.HandlerFunc
		keys func(i int) string
		// want is the round trips in every mode but describe-exec, which costs describeExec.
		want, describeExec float64
	}{
		{"first delivery, handler uses the transaction", plain, func(i int) string { return firsts[i] }, 3, 5},
		{"first delivery, handler queues its write", queued, func(int) string { return watermill.NewUUID() }, 2, 4},
		{"duplicate", plain, func(i int) string { return firsts[i] }, 2, 4},
		{"first delivery with LockTimeout (it travels in the claim's batch)", timeoutMW(writeInTx), func(int) string { return watermill.NewUUID() }, 3, 5},
		{"write-behind first delivery", writeBehind(store), func(i int) string { return wbFirsts[i] }, 1, 2},
		{"write-behind duplicate", writeBehind(store), func(i int) string { return wbFirsts[i] }, 2, 4},
		{"write-behind first delivery after duplicates", writeBehind(store), func(int) string { return watermill.NewUUID() }, 1, 2},
		{"write-behind first delivery with LockTimeout", writeBehind(withTimeout), func(int) string { return watermill.NewUUID() }, 1, 2},
	} {
		want := tc.want
		if mode == pgx.QueryExecModeDescribeExec {
			want = tc.describeExec
		}
		if got := perMessage(tc.h, tc.keys); got != want {
			t.Errorf("%s: %.2f round trips a message, want %.0f", tc.name, got, want)
		}
	}
	// Nothing was left on the server in the modes that keep no statement there.
	if !namesStatements(mode) {
		rows, err := pool.Query(ctx, "SELECT statement FROM pg_prepared_statements", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		named, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(named) != 0 {
			t.Errorf("%d statements prepared by name on the connection, want none: %q", len(named), named)
		}
	}
}

// namesStatements reports whether pgx's mode keeps prepared statements on the server.
func namesStatements(mode pgx.QueryExecMode) bool {
	return mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
}

// On a multi-statement store a write-behind message on MariaDB is one multi-statement request:
// one round trip, where a store made by NewDB sends BEGIN, the claim, the handler's INSERT and
// COMMIT. A duplicate sends the request, then ROLLBACK and the read of the record in a second
// one. Its claim-first mode sends START TRANSACTION with the claim, and the queued statements
// and the record with COMMIT: 3 round trips with the handler's own statement, 2 with it
// queued, 2 for a duplicate. A store made by NewDB sends 4 in every mode, and 2 more for a
// handler that takes the *sql.Tx: the savepoint that marks the claim's transaction when the
// handler takes it, and its RELEASE before COMMIT, which find a transaction the handler ended
// with a statement of its own (on the multi-statement store they travel in the claim's and
// the commit's requests).
func TestMySQLMultiStatementRoundTripsPerMessage(t *testing.T) {
	b := mysqlBackend(t)
	config, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	config.MultiStatements, config.InterpolateParams = true, true
	var writes atomic.Int64
	config.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{conn, &writes}, err
	}
	connector, err := mysql.NewConnector(config)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })

	ctx := context.Background()
	insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
	type mode struct {
		multi, writeBehind, queue bool
		lockTimeout               time.Duration
	}
	warmUps := 0
	handler := func(m mode) message.HandlerFunc {
		config := sqlinbox.Config{Table: b.table, LockTimeout: m.lockTimeout}
		var store interface {
			inbox.Store
			CheckTable(ctx context.Context) error
		}
		if m.multi {
			multi, multiDB, err := sqlinbox.NewMultiStatement(connector, sqlinbox.MySQL{}, config)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { multiDB.Close() })
			store = multi
		} else if store, err = sqlinbox.NewDB(db, sqlinbox.MySQL{}, config); err != nil {
			t.Fatal(err)
		}
		// The store's one table check, before counting: it is not a per-message cost.
		if err := store.CheckTable(ctx); err != nil {
			t.Fatal(err)
		}
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing", WriteBehind: m.writeBehind}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			if m.writeBehind || m.queue {
				return nil, inbox.ExecAtCommit(msg.Context(), insert, "billing", msg.UUID)
			}
			tx, ok := inbox.TxFromContext[*sql.Tx](msg.Context())
			if !ok {
				return nil, errors.New("no *sql.Tx in the handler's context")
			}
			_, err := tx.ExecContext(msg.Context(), insert, "billing", msg.UUID)
			return nil, err
		})
		if m.multi {
			// Nor is its one question whether the server runs multi-statement requests safely
			// (wsrep_on), asked by its first message, which also opens its pool's connection.
			if err := deliver(ctx, h, watermill.NewUUID()); err != nil {
				t.Fatal(err)
			}
			warmUps++
		}
		return h
	}
	const messages = 20
	perMessage := func(h message.HandlerFunc, keys []string) float64 {
		before := writes.Load()
		for _, key := range keys {
			if err := deliver(ctx, h, key); err != nil {
				t.Fatal(err)
			}
		}
		return float64(writes.Load()-before) / float64(len(keys))
	}
	newKeys := func() []string {
		keys := make([]string, messages)
		for i := range keys {
			keys[i] = watermill.NewUUID()
		}
		return keys
	}
	writeBehind, firsts := handler(mode{multi: true, writeBehind: true}), newKeys()
	claimFirst, claimFirstKeys := handler(mode{multi: true}), newKeys()
	for _, tc := range []struct {
		name string
		h    message.HandlerFunc
		keys []string
		want float64
	}{
		{"write-behind first delivery", writeBehind, firsts, 1},
		{"write-behind duplicate", writeBehind, firsts, 2},
		{"write-behind first delivery on a store made by NewDB", handler(mode{writeBehind: true}), newKeys(), 4},
		{"claim-first, handler uses the transaction", claimFirst, claimFirstKeys, 3},
		{"claim-first duplicate", claimFirst, claimFirstKeys, 2},
		{"claim-first, handler queues its write", handler(mode{multi: true, queue: true}), newKeys(), 2},
		{"claim-first with LockTimeout (it travels in the claim's request)", handler(mode{multi: true, lockTimeout: time.Second}), newKeys(), 3},
		{"claim-first on a store made by NewDB (the savepoint and its release)", handler(mode{}), newKeys(), 6},
		{"claim-first on a store made by NewDB, handler queues its write", handler(mode{queue: true}), newKeys(), 4},
	} {
		if got := perMessage(tc.h, tc.keys); got != tc.want {
			t.Errorf("%s: %.2f round trips a message, want %.0f", tc.name, got, tc.want)
		}
	}
	wantRows(t, "business rows", b.rows(t, b.business, ""), 7*messages+warmUps)
}

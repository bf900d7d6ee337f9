package main

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The variants of the cost scenario; the targets and the charts look them up by name.
const (
	vBusiness = "business alone"
	vHand     = "hand-written inbox"
	vPiped    = "hand-written inbox, claim sent with BEGIN"
	vTx       = "inbox, TxFromContext"
	vQueue    = "inbox, ExecAtCommit"
	// The claim-first modes on sqlinbox.NewMultiStatement's store: MariaDB/MySQL only.
	vTxText    = "inbox, TxFromContext, multi-statement"
	vQueueText = "inbox, ExecAtCommit, multi-statement"
	vWB        = "inbox, WriteBehind"
	vDup       = "inbox, duplicates only"

	benchConsumer = "bench"
	customer      = "acme"
	amountCents   = int64(1234)
)

// benchPayload is what every message carries: the middleware fingerprints it (SHA-256 by
// default) and stores the fingerprint with the claim, so its size is part of the cost.
var benchPayload = message.Payload(`{"customer":"acme","amount_cents":1234,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)

// backend is one database, reached at one round-trip time, with a business table, an inbox
// store and the table of a hand-written inbox.
type backend struct {
	scenario string        // "" for "cost"
	db       string        // "postgres", "mysql", "sqlite"
	delay    time.Duration // added by a delayProxy in each direction; 0: straight to the server
	rtt      time.Duration // measured round trip of an empty query; 0: in process
	store    inbox.Store
	// multiStore, if set, is a store made by sqlinbox.NewMultiStatement: its claim-first mode sends
	// BEGIN with the claim and the queued statements with COMMIT, its write-behind mode the
	// whole message as one request. Write-behind runs on it where it is set.
	multiStore inbox.Store
	// insert is the business INSERT; its arguments are (id, customer, amount).
	insert string
	// business runs BEGIN; INSERT; COMMIT.
	business func(ctx context.Context, id string) error
	// handWritten is what a team writes without the library: BEGIN; claim with an insert
	// that skips a conflict (a duplicate skips the INSERT); INSERT; COMMIT. It reports
	// whether the business INSERT ran.
	handWritten func(ctx context.Context, id string) (bool, error)
	// piped is handWritten with BEGIN and the claim sent in one batch: 3 round trips, the
	// fewest for a handler that writes in the claim's transaction. PostgreSQL only.
	piped func(ctx context.Context, id string) (bool, error)
	// inTx runs the business INSERT in the inbox transaction of ctx (TxFromContext).
	inTx func(ctx context.Context, id string) error
	// rows counts the business rows.
	rows func(ctx context.Context) (n int64, err error)
}

const invoiceDDL = `CREATE TABLE %s (id %s PRIMARY KEY, customer %s NOT NULL, amount_cents BIGINT NOT NULL)`

// pgBackend creates the tables on PostgreSQL and measures the round trip through pool.
func pgBackend(ctx context.Context, e *env, pool *pgxpool.Pool, delay time.Duration) (*backend, error) {
	invoices, inboxTable, handTable := e.table("postgres", "bench_invoice"), e.table("postgres", "bench_inbox"), e.table("postgres", "bench_hand")
	if _, err := pool.Exec(ctx, fmt.Sprintf(invoiceDDL, invoices, "uuid", "text")); err != nil {
		return nil, err
	}
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		return nil, err
	}
	hand, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: handTable}) // the same table shape
	if err != nil {
		return nil, err
	}
	if err := errors.Join(store.InitializeSchema(ctx), hand.InitializeSchema(ctx)); err != nil {
		return nil, err
	}
	b := &backend{db: "postgres", delay: delay, store: store,
		insert: fmt.Sprintf(`INSERT INTO %s (id, customer, amount_cents) VALUES ($1, $2, $3)`, invoices)}
	if b.rtt, err = rtt(ctx, pool); err != nil {
		return nil, err
	}
	claim := fmt.Sprintf(`INSERT INTO %s (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1`, handTable)
	b.business = func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, b.insert, id, customer, amountCents)
			return err
		})
	}
	b.handWritten = func(ctx context.Context, id string) (ran bool, err error) {
		return ran, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var one int
			if err := tx.QueryRow(ctx, claim, benchConsumer, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
				return nil // a duplicate
			} else if err != nil {
				return err
			}
			ran = true
			_, err := tx.Exec(ctx, b.insert, id, customer, amountCents)
			return err
		})
	}
	b.piped = func(ctx context.Context, id string) (ran bool, err error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return false, err
		}
		defer conn.Release() // a connection left in a transaction is closed
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		batch.Queue(claim, benchConsumer, id)
		results := conn.SendBatch(ctx, batch)
		var one int
		_, err = results.Exec()
		if err == nil {
			err = results.QueryRow().Scan(&one)
		}
		err = errors.Join(err, results.Close())
		if ran = err == nil; ran {
			_, err = conn.Exec(ctx, b.insert, id, customer, amountCents)
		} else if errors.Is(err, pgx.ErrNoRows) {
			err = nil // a duplicate
		}
		end := "COMMIT"
		if err != nil || !ran {
			end = "ROLLBACK"
		}
		if _, endErr := conn.Exec(ctx, end); err == nil {
			err = endErr
		}
		return ran, err
	}
	b.rows = func(ctx context.Context) (n int64, err error) {
		return n, pool.QueryRow(ctx, "SELECT count(*) FROM "+invoices).Scan(&n)
	}
	b.inTx = func(ctx context.Context, id string) error {
		tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
		if !ok {
			return errors.New("no pgx.Tx in the message context")
		}
		_, err := tx.Exec(ctx, b.insert, id, customer, amountCents)
		return err
	}
	return b, nil
}

// sqlBackend creates the tables on MySQL/MariaDB (db, reached with delay added each way) or
// SQLite (in process), reached through database/sql. multi, if set, is the driver's
// connector to db's server, for the multiStore.
func sqlBackend(ctx context.Context, e *env, name string, db *sql.DB, multi driver.Connector, delay time.Duration) (*backend, error) {
	var dialect sqlinbox.Dialect = sqlinbox.SQLite{}
	idType, textType, claimSQL := "TEXT", "TEXT", `INSERT INTO %s (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING`
	if name == "mysql" {
		dialect, idType, textType, claimSQL = sqlinbox.MySQL{}, "CHAR(36)", "VARCHAR(64)", `INSERT IGNORE INTO %s (consumer, message_id) VALUES (?, ?)`
	}
	invoices, inboxTable, handTable := e.table(name, "bench_invoice"), e.table(name, "bench_inbox"), e.table(name, "bench_hand")
	if _, err := db.ExecContext(ctx, fmt.Sprintf(invoiceDDL, invoices, idType, textType)); err != nil {
		return nil, err
	}
	store, err := sqlinbox.NewDB(db, dialect, sqlinbox.Config{Table: inboxTable})
	if err != nil {
		return nil, err
	}
	hand, err := sqlinbox.NewDB(db, dialect, sqlinbox.Config{Table: handTable})
	if err != nil {
		return nil, err
	}
	if err := errors.Join(store.InitializeSchema(ctx), hand.InitializeSchema(ctx)); err != nil {
		return nil, err
	}
	b := &backend{db: name, delay: delay, store: store, insert: fmt.Sprintf(`INSERT INTO %s (id, customer, amount_cents) VALUES (?, ?, ?)`, invoices)}
	if multi != nil {
		multiStore, multiDB, err := sqlinbox.NewMultiStatement(multi, dialect, sqlinbox.Config{Table: inboxTable})
		if err != nil {
			return nil, err
		}
		e.onClose(func() { multiDB.Close() })
		e.sized(multiDB)
		b.multiStore = multiStore
	}
	if name == "mysql" {
		if b.rtt, err = sqlRTT(ctx, db); err != nil {
			return nil, err
		}
	}
	claim := fmt.Sprintf(claimSQL, handTable)
	b.business = func(ctx context.Context, id string) error {
		return sqlTx(ctx, db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, b.insert, id, customer, amountCents)
			return err
		})
	}
	b.handWritten = func(ctx context.Context, id string) (ran bool, err error) {
		return ran, sqlTx(ctx, db, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, claim, benchConsumer, id)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err // n == 0: a duplicate
			}
			ran = true
			_, err = tx.ExecContext(ctx, b.insert, id, customer, amountCents)
			return err
		})
	}
	b.rows = func(ctx context.Context) (n int64, err error) {
		return n, db.QueryRowContext(ctx, "SELECT count(*) FROM "+invoices).Scan(&n)
	}
	b.inTx = func(ctx context.Context, id string) error {
		tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
		if !ok {
			return errors.New("no *sql.Tx in the message context")
		}
		_, err := tx.ExecContext(ctx, b.insert, id, customer, amountCents)
		return err
	}
	return b, nil
}

func sqlTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// variants returns the cost scenario's variants on b; each round checks that the handler ran
// once per first delivery, and that duplicates wrote no business row.
func (b *backend) variants(ctx context.Context, d time.Duration) ([]variant, error) {
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: benchConsumer}, nil)
	if err != nil {
		return nil, err
	}
	var handRuns, pipedRuns, txRuns, queueRuns, wbRuns atomic.Int64
	counted := func(runs *atomic.Int64, h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return h(msg)
		}
	}
	inTx := func(msg *message.Message) ([]*message.Message, error) { return nil, b.inTx(msg.Context(), msg.UUID) }
	queue := func(msg *message.Message) ([]*message.Message, error) {
		return nil, inbox.ExecAtCommit(msg.Context(), b.insert, msg.UUID, customer, amountCents)
	}
	all := func(n int64) int64 { return n }
	// handWritten counts the runs of a hand-written inbox's business INSERT.
	handWritten := func(name string, f func(context.Context, string) (bool, error), runs *atomic.Int64) variant {
		return countedVariant(name, d, handlerOp(func(msg *message.Message) ([]*message.Message, error) {
			ran, err := f(msg.Context(), msg.UUID)
			if ran {
				runs.Add(1)
			}
			return nil, err
		}, freshKey), runs, all)
	}
	vs := []variant{
		// The same handler and message without the middleware.
		timedVariant(vBusiness, d, handlerOp(func(msg *message.Message) ([]*message.Message, error) {
			return nil, b.business(msg.Context(), msg.UUID)
		}, freshKey)),
		handWritten(vHand, b.handWritten, &handRuns),
	}
	if b.piped != nil {
		vs = append(vs, handWritten(vPiped, b.piped, &pipedRuns))
	}
	vs = append(vs,
		countedVariant(vTx, d, handlerOp(mw(counted(&txRuns, inTx)), freshKey), &txRuns, all),
		countedVariant(vQueue, d, handlerOp(mw(counted(&queueRuns, queue)), freshKey), &queueRuns, all),
	)
	wbStore := b.store
	if b.multiStore != nil {
		wbStore = b.multiStore
		multi, err := inbox.NewMiddleware(b.multiStore, inbox.Config{Consumer: benchConsumer}, nil)
		if err != nil {
			return nil, err
		}
		var txTextRuns, queueTextRuns atomic.Int64
		vs = append(vs,
			countedVariant(vTxText, d, handlerOp(multi(counted(&txTextRuns, inTx)), freshKey), &txTextRuns, all),
			countedVariant(vQueueText, d, handlerOp(multi(counted(&queueTextRuns, queue)), freshKey), &queueTextRuns, all),
		)
	}
	// Write-behind: the handler runs first and only queues its writes, which a duplicate
	// discards. Duplicates go to it: its duplicates are the ones with a round-trip target.
	wb, err := inbox.NewMiddleware(wbStore, inbox.Config{Consumer: benchConsumer, WriteBehind: true}, nil)
	if err != nil {
		return nil, err
	}
	vs = append(vs, countedVariant(vWB, d, handlerOp(wb(counted(&wbRuns, queue)), freshKey), &wbRuns, all))
	keys, err := seedKeys(ctx, wb(queue), 1000, 8)
	if err != nil {
		return nil, fmt.Errorf("seed duplicates: %w", err)
	}
	dup := handlerOp(wb(queue), func(int) string { return keys.key() })
	return append(vs, variant{name: vDup, op: dup, run: func(ctx context.Context, workers int) (roundResult, error) {
		before, err := b.rows(ctx)
		if err != nil {
			return roundResult{}, err
		}
		res, err := runFor(ctx, workers, d, nil, dup)
		after, countErr := b.rows(ctx)
		if err = errors.Join(err, countErr); err == nil && after != before {
			err = fmt.Errorf("%d duplicates wrote %d business rows", res.msgs, after-before)
		}
		return res, err
	}}), nil
}

// handlerOp delivers one message with key(worker) as its UUID to h.
func handlerOp(h message.HandlerFunc, key func(worker int) string) op {
	return func(ctx context.Context, worker int) error {
		msg := message.NewMessage(key(worker), benchPayload)
		msg.SetContext(ctx)
		_, err := h(msg)
		return err
	}
}

func freshKey(int) string { return watermill.NewUUID() }

// countedVariant is a timed variant whose handler runs are checked after each round:
// want(msgs) gives the exact number of runs the round must have made.
func countedVariant(name string, d time.Duration, o op, runs *atomic.Int64, want func(msgs int64) int64) variant {
	return variant{name: name, op: o, run: func(ctx context.Context, workers int) (roundResult, error) {
		before := runs.Load()
		res, err := runFor(ctx, workers, d, nil, o)
		if err != nil {
			return res, err
		}
		if got, w := runs.Load()-before, want(res.msgs); got != w {
			return res, fmt.Errorf("handler ran %d times, want %d (%d messages)", got, w, res.msgs)
		}
		return res, nil
	}}
}

// keyPool hands out committed keys, round robin.
type keyPool struct {
	keys []string
	next atomic.Int64
}

func (p *keyPool) key() string { return p.keys[int(p.next.Add(1)-1)%len(p.keys)] }

// seedKeys delivers n fresh messages to h and returns their keys (all committed).
func seedKeys(ctx context.Context, h message.HandlerFunc, n, workers int) (*keyPool, error) {
	var (
		mu   sync.Mutex
		keys = make([]string, 0, n)
		left atomic.Int64
		stop = make(chan struct{})
		once sync.Once
	)
	left.Store(int64(n))
	_, err := runFor(ctx, workers, 0, stop, func(ctx context.Context, w int) error {
		if left.Add(-1) < 0 {
			once.Do(func() { close(stop) })
			return nil
		}
		key := watermill.NewUUID()
		if err := handlerOp(h, func(int) string { return key })(ctx, w); err != nil {
			return err
		}
		mu.Lock()
		keys = append(keys, key)
		mu.Unlock()
		return nil
	})
	return &keyPool{keys: keys}, err
}

// runCost is the cost scenario: the same business transaction with and without the inbox,
// on PostgreSQL at each round-trip time, and on MySQL/MariaDB and SQLite straight. Each
// PostgreSQL pool is closed before the next opens, to stay within the server's connections.
func runCost(ctx context.Context, e *env, rep *report) error {
	for _, delay := range e.opts.delays {
		pool, err := e.pgPool(ctx, delay)
		if err != nil {
			return err
		}
		b, err := pgBackend(ctx, e, pool, delay)
		if err == nil {
			log.Printf("postgres, %s each way: round trip %s", delay, b.rtt)
			err = b.measure(ctx, e, rep)
		}
		pool.Close()
		if err != nil {
			return fmt.Errorf("postgres, %s each way: %w", delay, err)
		}
	}
	// MariaDB/MySQL at each round-trip time too: write-behind mode there is one
	// multi-statement request (sqlinbox.NewMultiStatement), and so are the claim-first mode's
	// BEGIN with the claim and its queued statements with COMMIT.
	for _, delay := range e.opts.delays {
		if e.mysql == nil {
			break
		}
		mysql, err := e.mysqlAt(ctx, delay)
		if err != nil {
			return err
		}
		b, err := sqlBackend(ctx, e, "mysql", mysql.plain, mysql.connector, delay)
		if err == nil {
			log.Printf("mysql, %s each way: round trip %s", delay, b.rtt)
			err = b.measure(ctx, e, rep)
		}
		if err != nil {
			return fmt.Errorf("mysql, %s each way: %w", delay, err)
		}
	}
	if e.sqlite != nil {
		b, err := sqlBackend(ctx, e, "sqlite", e.sqlite, nil, 0)
		if err == nil {
			err = b.measure(ctx, e, rep)
		}
		if err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
	}
	return nil
}

// measure runs the variants on b at each worker count.
func (b *backend) measure(ctx context.Context, e *env, rep *report) error {
	variants, err := b.variants(ctx, e.opts.round)
	if err != nil {
		return err
	}
	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = v.name
	}
	for _, workers := range e.opts.workers {
		log.Printf("cost: %s, %s each way, %d workers", b.db, b.delay, workers)
		results, err := interleave(ctx, workers, e.opts.rounds, e.opts.round/4, variants)
		if err != nil {
			return err
		}
		at := at{scenario: cmp.Or(b.scenario, "cost"), db: b.db, delay: b.delay, rtt: b.rtt, workers: workers}
		rep.add(at, names, results, 0)
		rep.addDerived(at, dWBvsHand, ratios(results[slices.Index(names, vWB)], results[slices.Index(names, vHand)]))
		// What the multi-statement store buys each claim-first mode, round by round.
		for _, pair := range [][2]string{{vTxText, vTx}, {vQueueText, vQueue}} {
			if i := slices.Index(names, pair[0]); i >= 0 {
				rep.addDerived(at, pair[0]+" ÷ "+strings.TrimPrefix(pair[1], "inbox, ")+" without", ratios(results[i], results[slices.Index(names, pair[1])]))
			}
		}
	}
	return nil
}

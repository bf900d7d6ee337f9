package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Variant names; the targets look some of them up.
const (
	variantBusiness     = "business only"
	variantInbox        = "inbox"
	variantQueue        = "inbox + Queue (write-behind)"
	variantHalfDup      = "inbox, half duplicates"
	variantDupOnly      = "inbox, duplicates only"
	derivedDupCost      = "time of a duplicate ÷ time of a first delivery"
	derivedHalfVsInbox  = "half duplicates ÷ inbox (throughput)"
	variantWhatIf       = "what-if, not the library: Queue with the batch's COMMIT spelled %q"
	benchConsumer       = "bench"
	businessCustomer    = "acme"
	businessAmountCents = int64(1234)
)

// benchPayload is what every message carries: the middleware fingerprints it (SHA-256 by
// default) and stores the fingerprint with the claim, so its size is part of the cost.
var benchPayload = message.Payload(`{"customer":"acme","amount_cents":1234,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)

// backend is one database with a business table and an inbox store on it.
type backend struct {
	name  string // "postgres", "mysql", "sqlite"
	table string // the inbox table
	store inbox.Store
	// business runs the business transaction on its own: BEGIN; INSERT; COMMIT.
	business func(ctx context.Context, id string) error
	// inTx runs the business INSERT in the inbox transaction of ctx (TxFromContext).
	inTx func(ctx context.Context, id string) error
	// insert is the business INSERT, for inbox.Queue; its arguments are (id, customer, amount).
	insert string
}

// newBackend creates the business table and the inbox table on db ("postgres", "mysql" or
// "sqlite") under random names.
func newBackend(ctx context.Context, e *env, db string) (*backend, error) {
	invoices := e.table(db, "bench_invoice")
	inboxTable := e.table(db, "bench_inbox")
	b := &backend{name: db, table: inboxTable}
	switch db {
	case "postgres":
		pool := e.pg
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (
	id           uuid PRIMARY KEY,
	customer     text NOT NULL,
	amount_cents bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now()
)`, invoices)); err != nil {
			return nil, err
		}
		store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: inboxTable})
		if err != nil {
			return nil, err
		}
		if err := store.InitializeSchema(ctx); err != nil {
			return nil, err
		}
		b.store = store
		b.insert = fmt.Sprintf(`INSERT INTO %s (id, customer, amount_cents) VALUES ($1, $2, $3)`, invoices)
		b.business = func(ctx context.Context, id string) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
			if _, err := tx.Exec(ctx, b.insert, id, businessCustomer, businessAmountCents); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		b.inTx = func(ctx context.Context, id string) error {
			tx, ok := inbox.TxFromContext[pgx.Tx](ctx)
			if !ok {
				return fmt.Errorf("no pgx.Tx in the message context")
			}
			_, err := tx.Exec(ctx, b.insert, id, businessCustomer, businessAmountCents)
			return err
		}
		return b, nil
	case "mysql", "sqlite":
		var (
			sqlDB   *sql.DB
			dialect sqlinbox.Dialect
			ddl     string
		)
		if db == "mysql" {
			sqlDB, dialect = e.mysql, sqlinbox.MySQL
			ddl = `CREATE TABLE %s (
	id           CHAR(36) NOT NULL PRIMARY KEY,
	customer     VARCHAR(64) NOT NULL,
	amount_cents BIGINT NOT NULL,
	created_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
		} else {
			sqlDB, dialect = e.sqlite, sqlinbox.SQLite
			ddl = `CREATE TABLE %s (
	id           TEXT NOT NULL PRIMARY KEY,
	customer     TEXT NOT NULL,
	amount_cents INTEGER NOT NULL,
	created_at   TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)`
		}
		if _, err := sqlDB.ExecContext(ctx, fmt.Sprintf(ddl, invoices)); err != nil {
			return nil, err
		}
		store, err := sqlinbox.New(sqlDB, dialect, sqlinbox.Config{Table: inboxTable})
		if err != nil {
			return nil, err
		}
		if err := store.InitializeSchema(ctx); err != nil {
			return nil, err
		}
		b.store = store
		b.insert = fmt.Sprintf(`INSERT INTO %s (id, customer, amount_cents) VALUES (?, ?, ?)`, invoices)
		b.business = func(ctx context.Context, id string) error {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // a no-op after Commit
			if _, err := tx.ExecContext(ctx, b.insert, id, businessCustomer, businessAmountCents); err != nil {
				return err
			}
			return tx.Commit()
		}
		b.inTx = func(ctx context.Context, id string) error {
			tx, ok := inbox.TxFromContext[*sql.Tx](ctx)
			if !ok {
				return fmt.Errorf("no *sql.Tx in the message context")
			}
			_, err := tx.ExecContext(ctx, b.insert, id, businessCustomer, businessAmountCents)
			return err
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown database %q", db)
}

// middleware wraps h with the inbox middleware over b's store and counts the handler's runs.
func (b *backend) middleware(h message.HandlerFunc, runs *atomic.Int64) (message.HandlerFunc, error) {
	return middlewareOn(b.store, h, runs)
}

func middlewareOn(store inbox.Store, h message.HandlerFunc, runs *atomic.Int64) (message.HandlerFunc, error) {
	mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: benchConsumer}, nil)
	if err != nil {
		return nil, err
	}
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		if runs != nil {
			runs.Add(1)
		}
		return h(msg)
	}), nil
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
			time.Sleep(time.Millisecond)
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
	if err != nil {
		return nil, err
	}
	return &keyPool{keys: keys}, nil
}

// runDirect is scenario 1 on every database that is available.
func runDirect(ctx context.Context, e *env, rep *report) error {
	dbs := []string{"postgres"}
	if e.mysql != nil {
		dbs = append(dbs, "mysql")
	} else {
		rep.note("direct", "MariaDB/MySQL was not reachable: skipped.")
	}
	if e.sqlite != nil {
		dbs = append(dbs, "sqlite")
		rep.note("direct", "SQLite runs on one connection (one writer): more workers only queue for it.")
	}
	d := e.opts.round
	for _, db := range dbs {
		b, err := newBackend(ctx, e, db)
		if err != nil {
			return fmt.Errorf("%s: %w", db, err)
		}
		var inboxRuns, queueRuns, halfRuns, dupRuns atomic.Int64
		inboxH, err := b.middleware(func(msg *message.Message) ([]*message.Message, error) {
			return nil, b.inTx(msg.Context(), msg.UUID)
		}, &inboxRuns)
		if err != nil {
			return err
		}
		queueH, err := b.middleware(func(msg *message.Message) ([]*message.Message, error) {
			return nil, inbox.Queue(msg.Context(), b.insert, msg.UUID, businessCustomer, businessAmountCents)
		}, &queueRuns)
		if err != nil {
			return err
		}
		halfH, err := b.middleware(func(msg *message.Message) ([]*message.Message, error) {
			return nil, b.inTx(msg.Context(), msg.UUID)
		}, &halfRuns)
		if err != nil {
			return err
		}
		dupH, err := b.middleware(func(msg *message.Message) ([]*message.Message, error) {
			return nil, b.inTx(msg.Context(), msg.UUID)
		}, &dupRuns)
		if err != nil {
			return err
		}
		seed := 4000
		if db == "sqlite" {
			seed = 1000
		}
		pool, err := seedKeys(ctx, inboxH, seed, 8)
		if err != nil {
			return fmt.Errorf("%s: seed duplicates: %w", db, err)
		}
		inboxRuns.Store(0)

		// Half duplicates: each worker alternates a fresh key and a committed one.
		var halfFresh atomic.Int64
		flip := make([]bool, max(64, slices.Max(e.opts.workers))) // one per worker: no sharing
		halfKey := func(w int) string {
			flip[w%len(flip)] = !flip[w%len(flip)]
			if flip[w%len(flip)] {
				halfFresh.Add(1)
				return watermill.NewUUID()
			}
			return pool.key()
		}
		halfVariant := variant{name: variantHalfDup, run: func(ctx context.Context, workers int) (roundResult, error) {
			f0, r0 := halfFresh.Load(), halfRuns.Load()
			res, err := runFor(ctx, workers, d, nil, handlerOp(halfH, halfKey))
			if err != nil {
				return res, err
			}
			if runs, fresh := halfRuns.Load()-r0, halfFresh.Load()-f0; runs != fresh {
				return res, fmt.Errorf("handler ran %d times for %d fresh keys", runs, fresh)
			}
			return res, nil
		}}
		halfVariant.op = handlerOp(halfH, halfKey)

		all := func(n int64) int64 { return n }
		none := func(int64) int64 { return 0 }
		variants := []variant{
			timedVariant(variantBusiness, d, func(ctx context.Context, _ int) error { return b.business(ctx, watermill.NewUUID()) }),
			countedVariant(variantInbox, d, handlerOp(inboxH, freshKey), &inboxRuns, all),
			countedVariant(variantQueue, d, handlerOp(queueH, freshKey), &queueRuns, all),
			halfVariant,
			countedVariant(variantDupOnly, d, handlerOp(dupH, func(int) string { return pool.key() }), &dupRuns, none),
		}
		if db == "postgres" && e.opts.whatIf {
			for _, spelling := range []string{"commit", "COMMIT"} {
				var runs atomic.Int64
				h, err := middlewareOn(newWhatIfStore(e.pg, b.table, spelling), func(msg *message.Message) ([]*message.Message, error) {
					return nil, inbox.Queue(msg.Context(), b.insert, msg.UUID, businessCustomer, businessAmountCents)
				}, &runs)
				if err != nil {
					return err
				}
				variants = append(variants, countedVariant(fmt.Sprintf(variantWhatIf, spelling), d, handlerOp(h, freshKey), &runs, all))
			}
			rep.note("direct", "The *what-if* rows are not the library: they re-type sqlinbox.PgxStore's claim and write-behind commit "+
				"in bench/whatif.go, once as the library spells the batch's COMMIT (\"commit\", to check that the copy reproduces the library's figures) "+
				"and once spelled \"COMMIT\", so that the cache invalidation by closeCommitted (sqlinbox/pgx.go) misses the batch's prepared statement. See docs/benchmarks/README.md.")
		}
		for _, workers := range e.opts.workers {
			log.Printf("direct %s, %d workers", db, workers)
			results, err := interleave(ctx, workers, e.opts.rounds, d/4, variants)
			if err != nil {
				return fmt.Errorf("%s: %w", db, err)
			}
			names := make([]string, len(variants))
			for i, v := range variants {
				names[i] = v.name
			}
			rep.add("direct", db, workers, names, results, 0)
			rep.addDerived("direct", db, workers, derivedDupCost, "", ratios(results[1], results[4]))
			rep.addDerived("direct", db, workers, derivedHalfVsInbox, "", ratios(results[3], results[1]))
		}
	}
	return nil
}

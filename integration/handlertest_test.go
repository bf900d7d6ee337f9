package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// kitScenarios are the kit's scenarios as functions, by the name their reports start with.
var kitScenarios = []struct {
	name string
	run  func(context.Context, testing.TB, handlertest.Case, *handlertest.Options) handlertest.Result
}{
	{"reference", handlertest.Reference},
	{"copies", handlertest.Copies},
	{"concurrent", handlertest.Concurrent},
	{"failures", handlertest.Failures},
	{"external", handlertest.External},
}

func forEachKitBackend(t *testing.T, run func(t *testing.T, f *kitFixture)) {
	for _, b := range kitBackends {
		t.Run(b.name, func(t *testing.T) { run(t, b.open(t)) })
	}
}

// kitModes are the three ways a correct handler writes.
var kitModes = []struct {
	name        string
	mode        writeMode
	writeBehind bool
}{
	{"claim-first with TxFromContext", throughTx, false},
	{"claim-first with Queue", queued, false},
	{"write-behind", queued, true},
}

// Correct handlers pass every scenario, in every mode, on every database; the run time of
// each is logged (the figures of docs/testing.md).
func TestHandlerKitPassesCorrectHandlers(t *testing.T) {
	backends := append(slices.Clone(kitBackends), struct {
		name string
		open func(t *testing.T) *kitFixture
	}{"database-sql/mariadb/multi-statements", multiStatementsKitFixture}, struct {
		name string
		open func(t *testing.T) *kitFixture
	}{"database-sql/mariadb/prepared", preparedKitFixture}, struct {
		name string
		open func(t *testing.T) *kitFixture
	}{"database-sql/mariadb/coalesced", coalescedKitFixture})
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, m := range kitModes {
				t.Run(m.name, func(t *testing.T) {
					f := b.open(t)
					rec := &recordingTB{TB: t}
					c, opts := f.kitCase(t, f.billing(m.mode), m.writeBehind)
					took := timed(func() { handlertest.Run(t.Context(), rec, c, opts) })
					for _, r := range rec.reports() {
						t.Errorf("a correct handler was reported:\n%s", r)
					}
					// The store's own statements (the claim, the record, COMMIT) are not the
					// handler's: the kit fails exactly the handler's two.
					if want := kitCountLog(m.writeBehind, 2); !slices.ContainsFunc(rec.logs, func(l string) bool { return strings.Contains(l, want) }) {
						t.Errorf("the kit did not count the handler's 2 statements; it logged %q", rec.logs)
					}
					t.Logf("%s, %s: every scenario in %s", b.name, m.name, took.Round(time.Millisecond))
				})
			}
		})
	}
}

// buggyHandlers each break one rule of the inbox; caughtBy are the scenarios that must
// report them, and want the texts their reports must contain.
var buggyHandlers = []struct {
	name     string
	handler  func(f *kitFixture) message.HandlerFunc
	pgxOnly  bool
	caughtBy []string
	want     func(f *kitFixture) []string
	// sqlWant, if set, adds texts on database/sql, where the kit sees the statements on the
	// pool's other connections and names them.
	sqlWant func(f *kitFixture) []string
	// sqlCaughtBy, if set, replaces caughtBy on database/sql, where those statements are
	// seen by the reference delivery too.
	sqlCaughtBy []string
	// onSQLite, if set, replaces caughtBy and want on SQLite, where the handler's own
	// statements on another connection wait for its inbox transaction: the reference
	// delivery is never acked, so the run stops there, and each scenario alone reports it.
	onSQLite func(f *kitFixture) []string
}{
	{
		name: "writes through the pool", handler: (*kitFixture).ledgerOnThePool, caughtBy: []string{"failures"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: failures (COMMIT fails), attempt 1: the delivery was nacked, but the state is not the state of before it:\n\tLedger: 1 rows, want 0 (extra: {OrderID:order-1 Cents:1250})",
				"handlertest: failures (the handler returns, then a panic), attempt 1: the delivery was nacked, but the state is not",
				"probable cause: a write outside the inbox transaction: a repository on the pool",
			}
		},
		sqlWant: func(f *kitFixture) []string {
			return []string{"probable cause: a write outside the inbox transaction: a repository on the pool? " +
				"While the handler ran, these ran on other connections: " + f.placeholders(insert(f.ledger))}
		},
		onSQLite: func(f *kitFixture) []string {
			return []string{
				"handlertest: reference, delivery 1: the delivery of the message, with no failure injected, was nacked: ",
				"SQLITE_BUSY",
				"probable cause: a write outside the inbox transaction: a repository on the pool? While the handler ran, these ran on other connections: " +
					insert(f.ledger) + "; they waited for the inbox transaction's own locks, which the handler holds (SQLite has one writer): the handler deadlocks with itself",
				"handlertest: reference: the message was not acked in 3 deliveries; the other scenarios need one that is",
			}
		},
	},
	{
		name: "publishes with the broker's publisher and a fresh UUID", handler: (*kitFixture).brokerPublisher,
		caughtBy: []string{"copies", "failures"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: copies, copy 1 of 3: the copy produced other messages than the first delivery",
				"\tnot sent again: ",
				"probable cause: a message published outside inbox.NewPublisher (with the broker's publisher?)",
				"handlertest: failures (COMMIT fails), attempt 1: the nacked attempt published 1 message(s):",
				"probable cause: a message published with a new UUID on each attempt: publish through inbox.NewPublisher",
			}
		},
	},
	{
		name: "writes in a goroutine after returning", handler: (*kitFixture).auditInAGoroutine, caughtBy: []string{"failures"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: failures (statement 1 of 2 fails (" + f.placeholders(insert(f.invoices)) + ")), attempt 1: the delivery was nacked, but the state is not the state of before it:\n\tAudit: 1 rows, want 0",
				"a goroutine that writes after the handler returned",
			}
		},
		sqlWant: func(f *kitFixture) []string {
			return []string{
				"handlertest: reference, delivery 1: after the handler returned, 1 statement(s) ran with the message's context outside the inbox transaction:\n\t" +
					f.placeholders(insert(f.audit)) + "\n\tprobable cause: a goroutine that writes after the handler returned",
				"probable cause: a goroutine that writes after the handler returned: write before returning, through the inbox transaction; " +
					"these ran after it returned: " + f.placeholders(insert(f.audit)) + " (after the handler returned)",
			}
		},
		sqlCaughtBy: []string{"failures", "reference"},
	},
	{
		name: "writes in a goroutine after returning, through the inbox transaction", handler: (*kitFixture).auditInAGoroutineThroughTheTx,
		pgxOnly: true, caughtBy: []string{"reference"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: reference, delivery 1: the inbox transaction was used after the handler returned (1 time(s)); the kit refused it:\n\t" + f.placeholders(insert(f.audit)),
				"probable cause: a goroutine that writes after the handler returned",
			}
		},
	},
	{
		name: "calls the payment client without the key", handler: (*kitFixture).chargeWithoutKey, caughtBy: []string{"external"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: external, attempt 1 (COMMIT fails): the handler called an external system without an idempotency key",
				"handlertest: external, attempt 2 (the redelivery): the handler called an external system without an idempotency key",
				"probable cause: an external call without inbox.KeyFromContext's key",
			}
		},
	},
	{
		name: "calls the payment client with a new key per attempt", handler: (*kitFixture).chargeWithNewKey, caughtBy: []string{"external"},
		want: func(f *kitFixture) []string {
			return []string{
				`handlertest: external: the handler called an external system with keys other than inbox.KeyFromContext's ("` + kitMessageUUID + `"):`,
				"\tattempt 1 (COMMIT fails): \"", "\tattempt 2 (the redelivery): \"",
				"probable cause: a new key on each attempt: pass inbox.KeyFromContext's key",
			}
		},
	},
	{
		name: "commits the inbox transaction itself", handler: (*kitFixture).commitsItself, caughtBy: []string{"failures", "reference"},
		want: func(f *kitFixture) []string {
			return []string{
				"handlertest: reference, delivery 1: the delivery of the message, with no failure injected, was nacked: ",
				"probable cause: the handler ended the inbox transaction itself (its data layer's Commit?): leave Commit and Rollback to the middleware (the handler called Commit on it)",
				"handlertest: failures (COMMIT fails), attempt 1: the delivery was nacked, but the state is not the state of before it:\n\tInvoices: 1 rows, want 0",
			}
		},
	},
}

// Each buggy handler is reported by exactly the scenarios that should catch it, with the
// messages a team acts on; and with those scenarios switched off (every other scenario run
// alone), it passes: each scenario is what catches its handler.
func TestHandlerKitCatchesBuggyHandlers(t *testing.T) {
	t.Parallel()
	for _, bug := range buggyHandlers {
		t.Run(bug.name, func(t *testing.T) {
			forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
				if bug.pgxOnly && !f.pgx {
					t.Skip("on database/sql a use of the *sql.Tx after the middleware ended it is refused by database/sql (sql.ErrTxDone) and never reaches the kit")
				}
				caughtBy, want, alone := bug.caughtBy, bug.want(f), bug.caughtBy
				if !f.pgx && bug.sqlWant != nil {
					want = append(want, bug.sqlWant(f)...)
				}
				if !f.pgx && bug.sqlCaughtBy != nil {
					caughtBy, alone = bug.sqlCaughtBy, bug.sqlCaughtBy
				}
				if f.sqlite && bug.onSQLite != nil {
					caughtBy, want, alone = []string{"reference"}, bug.onSQLite(f), nil
					for _, s := range kitScenarios {
						alone = append(alone, s.name)
					}
				}
				c, opts := f.kitCase(t, bug.handler(f), false)
				rec := &recordingTB{TB: t}
				took := timed(func() { handlertest.Run(t.Context(), rec, c, opts) })
				reports := rec.reports()
				if got := scenariosOf(reports); !slices.Equal(got, caughtBy) {
					t.Errorf("reported by %q, want %q", got, caughtBy)
				}
				all := strings.Join(reports, "\n")
				for _, want := range want {
					if !strings.Contains(all, want) {
						t.Errorf("no report contains %q", want)
					}
				}
				t.Logf("every scenario in %s, %d report(s):\n%s", took.Round(time.Millisecond), len(reports), all)

				for _, s := range kitScenarios {
					rec := &recordingTB{TB: t}
					s.run(t.Context(), rec, c, opts)
					caught := len(rec.reports()) > 0
					if want := slices.Contains(alone, s.name); caught != want {
						t.Errorf("%s alone: reported %v, want %v:\n%s", s.name, caught, want, strings.Join(rec.reports(), "\n"))
					}
				}
			})
		})
	}
}

// A handler that never uses the inbox transaction is refused, saying so, in both modes.
func TestHandlerKitRefusesAHandlerThatNeverUsesTheTransaction(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		for _, tc := range []struct {
			name        string
			handler     message.HandlerFunc
			writeBehind bool
			want        string
		}{
			{"everything on the pool", f.everythingOnThePool(), false, "handlertest: reference: the handler never used the inbox transaction: " +
				"it ran no statement through inbox.TxFromContext's transaction and queued none with inbox.ExecAtCommit"},
			{"nothing at all", func(*message.Message) ([]*message.Message, error) { return nil, nil }, false,
				"handlertest: reference: the handler never used the inbox transaction"},
			{"write-behind, nothing queued", f.everythingOnThePool(), true,
				"handlertest: reference: the handler queued no statement (inbox.ExecAtCommit): in write-behind mode its writes must be queued"},
		} {
			if f.sqlite && tc.name == "everything on the pool" {
				// The claim holds SQLite's one write lock: the pool's write waits for it.
				tc.want = "handlertest: reference, delivery 1: the delivery of the message, with no failure injected, was nacked: database is locked"
			}
			rec := &recordingTB{TB: t}
			c, opts := f.kitCase(t, tc.handler, tc.writeBehind)
			handlertest.Run(t.Context(), rec, c, opts)
			if reports := rec.reports(); len(reports) == 0 || !strings.HasPrefix(reports[0], tc.want) {
				t.Errorf("%s: reports %q, want the first starting %q", tc.name, reports, tc.want)
			}
		}
	})
}

// A Snapshot or a Reset that fails (or panics) is reported, and the run stops, with no panic.
func TestHandlerKitReportsAFailingSnapshotOrReset(t *testing.T) {
	forEachKitBackend(t, func(t *testing.T, f *kitFixture) {
		errDown := errors.New("snapshot: connection refused")
		for _, tc := range []struct {
			name   string
			change func(c *handlertest.Case)
			want   string
		}{
			{"Snapshot fails", func(c *handlertest.Case) {
				c.Snapshot = func(context.Context) (any, error) { return nil, errDown }
			}, "handlertest: reference: Case.Snapshot failed: snapshot: connection refused"},
			{"Snapshot fails after the first delivery", func(c *handlertest.Case) {
				calls := 0
				c.Snapshot = func(ctx context.Context) (any, error) {
					if calls++; calls > 1 {
						return nil, errDown
					}
					return f.snapshot(ctx)
				}
			}, "handlertest: reference: Case.Snapshot failed: snapshot: connection refused"},
			{"Snapshot panics", func(c *handlertest.Case) {
				c.Snapshot = func(context.Context) (any, error) { panic("no table") }
			}, "handlertest: reference: Case.Snapshot failed: panic: no table"},
			{"Reset fails", func(c *handlertest.Case) {
				c.Reset = func(context.Context) error { return errBroken }
			}, "handlertest: reference: Case.Reset failed: broken"},
		} {
			c, opts := f.kitCase(t, f.billing(throughTx), false)
			tc.change(&c)
			rec := &recordingTB{TB: t}
			handlertest.Run(t.Context(), rec, c, opts)
			if reports := rec.reports(); len(reports) != 1 || !strings.HasPrefix(reports[0], tc.want) {
				t.Errorf("%s: reports %q, want one starting %q", tc.name, reports, tc.want)
			}
		}
	})
}

// A database/sql store on a *sql.DB not opened through the kit is refused, saying how to
// open it.
func TestHandlerKitRefusesASQLStoreItCannotSee(t *testing.T) {
	db := openSQL(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "plain.db")+"?_pragma=busy_timeout(10000)")
	f := sqlKitFixture(t, "database-sql/sqlite, plain", db, sqlinbox.SQLite{}, sqlinbox.Config{})
	rec := &recordingTB{TB: t}
	c, opts := f.kitCase(t, f.billing(throughTx), false)
	handlertest.Run(t.Context(), rec, c, opts)
	want := "handlertest: the store's transaction is a *sql.Tx on a *sql.DB the kit does not see: " +
		"open the *sql.DB of the store and of the handler's repositories with handlertest.OpenDB"
	if reports := rec.reports(); len(reports) != 1 || !strings.HasPrefix(reports[0], want) {
		t.Errorf("reports %q, want one starting %q", reports, want)
	}
}

// The same for a store whose data layer begins its transactions (sqlinbox.Config.Begin): the
// report names the data layer's type; on a *sql.DB opened through the kit the same handler
// passes, its statements counted through the data layer's transaction.
func TestHandlerKitFollowsConfigBeginOnlyOnItsOwnPool(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T, path string) *sql.DB
		want string
	}{
		{"plain pool", func(t *testing.T, path string) *sql.DB { return openSQL(t, "sqlite", "file:"+path) },
			"handlertest: the store's transaction is a *integration.appTx on a *sql.DB the kit does not see"},
		{"the kit's pool", func(t *testing.T, path string) *sql.DB {
			db, err := handlertest.OpenDB("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			return db
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t, filepath.Join(t.TempDir(), "begin.db")+"?_pragma=busy_timeout(250)")
			f := sqlKitFixture(t, "database-sql/sqlite, Config.Begin", db, sqlinbox.SQLite{}, sqlinbox.Config{Begin: beginApp(db)})
			rec := &recordingTB{TB: t}
			kc, opts := f.kitCase(t, func(msg *message.Message) ([]*message.Message, error) {
				tx, ok := inbox.TxFromContext[*appTx](msg.Context())
				if !ok {
					return nil, errNoTx
				}
				_, err := tx.ExecContext(msg.Context(), "INSERT INTO "+f.invoices+" (order_id, cents) VALUES (?, ?)", msg.UUID, 1250)
				return nil, err
			}, false)
			opts.Probe = nil // the handler calls no external system
			handlertest.Run(t.Context(), rec, kc, opts)
			reports := rec.reports()
			switch {
			case c.want == "" && len(reports) > 0:
				t.Errorf("reports %q, want none", reports)
			case c.want != "" && (len(reports) != 1 || !strings.HasPrefix(reports[0], c.want)):
				t.Errorf("reports %q, want one starting %q", reports, c.want)
			}
		})
	}
}

// Concurrent copies that hang are reported with where each is, and the kit returns: one
// copy's handler waits on a channel nobody closes until the test ends, the others wait
// for its claim.
func TestHandlerKitReportsConcurrentCopiesThatHang(t *testing.T) {
	f := pgxKitFixture(t)
	var mu sync.Mutex
	runs := 0
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) }) // runs before the tables are dropped
	correct := f.billing(throughTx)
	c, opts := f.kitCase(t, func(msg *message.Message) ([]*message.Message, error) {
		mu.Lock()
		runs++
		blocks := runs > 1 // the reference runs first
		mu.Unlock()
		if blocks {
			<-stuck
		}
		return correct(msg)
	}, false)
	opts.Deadline = 300 * time.Millisecond
	rec := &recordingTB{TB: t}
	handlertest.Concurrent(t.Context(), rec, c, opts) // returns: a hang is reported, not waited for
	all := strings.Join(rec.reports(), "\n")
	for _, want := range []string{
		"handlertest: concurrent: 4 of 4 copies still in flight after 300ms:",
		", delivery 1 (in the handler)",
		", delivery 1 (claiming)",
		"handlertest: concurrent: the copies still run 300ms after their context was cancelled; the run stops here",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no report contains %q; the reports:\n%s", want, all)
		}
	}
}

// kitCountLog is how the kit's reference logs the handler's n statements: run through the
// inbox transaction, or queued in write-behind mode.
func kitCountLog(writeBehind bool, n int) string {
	if writeBehind {
		return fmt.Sprintf("the handler queued %d statement(s)", n)
	}
	return fmt.Sprintf("the handler ran %d statement(s)", n)
}

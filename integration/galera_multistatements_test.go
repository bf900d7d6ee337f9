package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The regression test of multi-statement requests on Galera: 2,000 orders, one copy each,
// spread over stores on the 3 nodes, every handler adding 1 to one hot counter row besides
// its invoice, so that nearly every transaction conflicts with another node's write-set. A
// node that aborts a transaction partway through a request runs the rest of the request in
// autocommit: the library used to ack messages with no claim and no invoice, and to commit
// invoices twice. In every mode of a multi-statement store the run must end one of two ways: refused
// loudly at the first claim, with nothing written by any of the 2,000, or exactly once (one
// claim and one invoice per order, the counter at 2,000).
func galeraMultiStatementsHotRowIsRefusedOrExactlyOnce(t *testing.T) {
	const orders, workers = 2000, 8
	for _, m := range galeraMultiStatementModes {
		t.Run(m.name, func(t *testing.T) {
			began := time.Now()
			c := newGaleraTables(t)
			run := &trafficRun{}
			var handlers []message.HandlerFunc
			for node := range c.g.Nodes {
				handlers = append(handlers, c.handler(t, c.store(t, node, m.galeraMode, nil), m.galeraMode, true, run))
			}
			keys, copies, _ := newOrders(orders, 1)

			err := deliver(context.Background(), handlers[0], keys[0])
			if errors.Is(err, sqlinbox.ErrMultiStatementRefused) {
				checkRefusal(t, err, m.refusal)
				refused := 1
				for i, key := range keys[1:] {
					err := deliver(context.Background(), handlers[i%len(handlers)], key)
					if !errors.Is(err, sqlinbox.ErrMultiStatementRefused) {
						t.Fatalf("order %d of %d: %v, want ErrMultiStatementRefused", i+2, orders, err)
					}
					refused++
				}
				wantRows(t, "claims", c.rows(t, c.table, ""), 0)
				wantRows(t, "invoices", c.rows(t, c.business, ""), 0)
				wantRows(t, "counter", c.counterValue(t), 0)
				if !m.writeBehind && run.runs.Load() != 0 {
					t.Errorf("the handler ran %d times behind a refused claim", run.runs.Load())
				}
				report(t, fmt.Sprintf("Galera hot row %s: %d of %d orders refused at their claim, nothing written (%.1fs): %v",
					m.name, refused, orders, time.Since(began).Seconds(), err))
				return
			}
			if err != nil && !galeraRetriable(err) {
				t.Fatalf("the first order: %v, want an ack, a refusal or a deadlock", err)
			}

			run.deliverCopies(t, handlers, keys, copies, workers, nil)
			c.checkExactlyOnce(t, run, orders)
			wantRows(t, "counter", c.counterValue(t), orders)
			counts := run.nackCounts()
			report(t, fmt.Sprintf("Galera hot row %s: %d orders, %d handler runs, %d deadlocks (1213), %d other nacks; %d invoices, %d claims, counter %d (%.1fs)",
				m.name, orders, run.runs.Load(), counts[errDeadlock], len(run.nacks)-counts[errDeadlock],
				c.rows(t, c.business, ""), c.rows(t, c.table, ""), c.counterValue(t), time.Since(began).Seconds()))
		})
	}
}

// galeraRetriable reports whether err is one a redelivery fixes on Galera.
func galeraRetriable(err error) bool {
	n := mysqlErrorNumber(err)
	return n == errDeadlock || n == errLockWaitTimeout
}

// checkRefusal fails t unless err refuses a multi-statement store saying which mode, why and
// what to use instead.
func checkRefusal(t *testing.T, err error, mode string) {
	t.Helper()
	for _, want := range []string{
		mode,
		"wsrep_on = ON",
		"another node's write-set aborts runs the rest of its request in autocommit",
		"make the store with sqlinbox.NewDB",
		"the default claim-first mode is exactly once on Galera",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q: want it to say %q", err, want)
		}
	}
}

// Bad input: a multi-statement store on a Galera node, in each of its modes, fails every
// message with ErrMultiStatementRefused, naming the mode and the alternative; the handler does
// not run behind the refused claim, nothing is written, and the refusal is logged once per
// store, not per message. It is never a silent fallback to a statement at a time.
func galeraRefusesMultiStatements(t *testing.T) {
	for _, m := range galeraMultiStatementModes {
		t.Run(m.name, func(t *testing.T) {
			c := newGaleraTables(t)
			logger := watermill.NewCaptureLogger()
			run := &trafficRun{}
			h := c.handler(t, c.store(t, 1, m.galeraMode, logger), m.galeraMode, false, run)
			for i := range 3 {
				err := deliver(context.Background(), h, watermill.NewUUID())
				if !errors.Is(err, sqlinbox.ErrMultiStatementRefused) {
					t.Fatalf("delivery %d: %v, want ErrMultiStatementRefused", i+1, err)
				}
				checkRefusal(t, err, m.refusal)
			}
			if !m.writeBehind && run.runs.Load() != 0 {
				t.Errorf("the handler ran %d times behind a refused claim", run.runs.Load())
			}
			wantRows(t, "claims", c.rows(t, c.table, ""), 0)
			wantRows(t, "invoices", c.rows(t, c.business, ""), 0)
			if logged := logger.Captured()[watermill.ErrorLogLevel]; len(logged) != 1 {
				t.Errorf("%d refusals logged at error level for 3 messages, want 1", len(logged))
			}
		})
	}
}

package sqlinbox

import (
	"context"
	"database/sql/driver"
	"testing"
)

// execOnlyConn is a driver connection that runs every statement and allocates nothing.
type execOnlyConn struct{ driver.Conn }

func (execOnlyConn) ExecContext(context.Context, string, []driver.NamedValue) (driver.Result, error) {
	return driver.RowsAffected(1), nil
}

// The multi-statement pool's connections forward the application's statements as they are:
// no allocation for a statement that is not the store's commit request.
func TestMultiStatementConnForwardsWithoutAllocating(t *testing.T) {
	c := &multiStatementConn{conn: execOnlyConn{}}
	ctx := context.Background()
	args := []driver.NamedValue{{Ordinal: 1, Value: int64(7)}, {Ordinal: 2, Value: "order-1"}}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.ExecContext(ctx, "INSERT INTO invoices (id, order_id) VALUES (?, ?)", args); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per statement, want 0", allocs)
	}
}

// resultsConn is a driver connection whose every request reports results statements run, as
// go-sql-driver/mysql's result does, and that records what it was sent.
type resultsConn struct {
	driver.Conn
	results int
	sent    []string
}

type allResultsOf int

func (r allResultsOf) LastInsertId() (int64, error) { return 0, nil }
func (r allResultsOf) RowsAffected() (int64, error) { return 0, nil }
func (r allResultsOf) AllRowsAffected() []int64     { return make([]int64, r) }

func (c *resultsConn) ExecContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Result, error) {
	c.sent = append(c.sent, query)
	return allResultsOf(c.results), nil
}

// The store's commit request counts as committed only when the server ran each of its
// statements, COMMIT among them; otherwise its transaction is rolled back.
func TestMultiStatementCommitRequestCountsItsResults(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		results   int
		committed bool
	}{{1, false}, {2, false}, {3, true}, {4, false}} {
		inner := &resultsConn{results: 1 + 1} // START TRANSACTION and the claim
		c := &multiStatementConn{conn: inner}
		if err := c.beginWith(ctx, "START TRANSACTION\n;INSERT claim", 2, nil); err != nil {
			t.Fatal(err)
		}
		tx, err := c.BeginTx(ctx, driver.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inner.results = tc.results
		// Two statements and the COMMIT the connection appends.
		_, err = c.ExecContext(ctx, "INSERT a\n;INSERT b", []driver.NamedValue{{Ordinal: 1, Value: endsInCommit{2}}})
		if (err == nil) != tc.committed {
			t.Errorf("%d results of 3: err = %v, want committed %v", tc.results, err, tc.committed)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		rolledBack := inner.sent[len(inner.sent)-1] == "ROLLBACK"
		if rolledBack == tc.committed {
			t.Errorf("%d results of 3: sent %q last, want a ROLLBACK only when not committed", tc.results, inner.sent[len(inner.sent)-1])
		}
	}

	// A result that does not say how many statements ran is refused.
	c := &multiStatementConn{conn: execOnlyConn{}}
	if _, err := c.ExecContext(ctx, "START TRANSACTION\n;COMMIT", []driver.NamedValue{{Ordinal: 1, Value: holdsStatements{2}}}); err == nil {
		t.Error("a result without AllRowsAffected was taken as committed")
	}
}

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

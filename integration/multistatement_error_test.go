package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// What MariaDB does with the rest of a multi-statement text when one of its statements fails,
// the ground a request carrying several messages' transactions stands on: the server stops
// at the failing statement and runs nothing after it; the transactions committed before it
// stay committed; the failing transaction stays open on the connection with what its earlier
// statements wrote, the failed statement alone undone (a duplicate key, and a lock wait
// timeout with innodb_rollback_on_timeout off, the default), until the client ends it. Rows
// are counted from another session.
func TestMultiStatementTextStopsAtTheFailingStatement(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db := openSQL(t, "mysql", dsn+sep+"multiStatements=true&innodb_lock_wait_timeout=1")
	other := openSQL(t, "mysql", dsn)
	table := testenv.Name("multi_error")
	if _, err := other.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = other.ExecContext(context.WithoutCancel(ctx), "DROP TABLE "+table) })
	// idsOn lists the table's rows as q's session sees them.
	idsOn := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) string {
		t.Helper()
		var got string
		if err := q.QueryRowContext(ctx, "SELECT COALESCE(GROUP_CONCAT(id ORDER BY id), '') FROM "+table).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	ids := func() string { return idsOn(other) }
	insert := func(id int) string { return fmt.Sprintf("INSERT INTO %s VALUES (%d)", table, id) }
	// three messages' transactions in one text; the second's second statement is the one
	// the case makes fail
	text := func(a int, failing string, c int) string {
		return strings.Join([]string{
			"START TRANSACTION", insert(a), "COMMIT",
			"START TRANSACTION", insert(a + 1), failing, insert(a + 2), "COMMIT",
			"START TRANSACTION", insert(c), "COMMIT",
		}, "; ")
	}

	// holding returns the insert of id, which waits for another session's transaction that
	// inserted it first.
	holding := func(t *testing.T, id int) string {
		holder, err := other.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = holder.Rollback() })
		if _, err := holder.ExecContext(ctx, insert(id)); err != nil {
			t.Fatal(err)
		}
		return insert(id)
	}
	for _, c := range []struct {
		name string
		// setup returns the failing statement
		setup func(t *testing.T) (failing string)
		code  string
		// on the connection after the error: whether a transaction is open, and its rows
		open int
		mine string
	}{
		{"duplicate key", func(t *testing.T) string { return insert(10) }, "Error 1062", 1, "10,11"},
		{"lock wait timeout", func(t *testing.T) string { return holding(t, 99) }, "Error 1205", 1, "10,11"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := other.ExecContext(ctx, "DELETE FROM "+table); err != nil {
				t.Fatal(err)
			}
			failing := c.setup(t)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = conn.ExecContext(ctx, text(10, failing, 20))
			if err == nil || !strings.Contains(err.Error(), c.code) {
				t.Fatalf("the text returned %v, want %s", err, c.code)
			}
			if got := ids(); got != "10" {
				t.Errorf("rows seen from another session: %q, want only the first transaction's, 10", got)
			}
			var open int
			if err := conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&open); err != nil {
				t.Fatal(err)
			}
			mine := idsOn(conn)
			if open != c.open || mine != c.mine {
				t.Errorf("on the connection after the error: in a transaction %d, rows %q; want %d and %q (nothing after the failure run)", open, mine, c.open, c.mine)
			}
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if got := ids(); got != "10" {
				t.Errorf("rows after the ROLLBACK: %q, want 10", got)
			}
		})
	}
}

package sqlinbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// goodColumns is the default schema as a dialect describes it.
func goodColumns() []TableColumn {
	return []TableColumn{
		{Name: "consumer", Type: "varchar(255)", KeyPosition: 1, Exact: true, PrimaryKey: "inbox_pkey"},
		{Name: "message_id", Type: "varchar(255)", KeyPosition: 2, Exact: true, PrimaryKey: "inbox_pkey"},
		{Name: "processed_at", Type: "timestamptz", Temporal: true, HasDefault: true, PrimaryKey: "inbox_pkey"},
		{Name: "payload_hash", Type: "bytea", Binary: true, Exact: true, Nullable: true, PrimaryKey: "inbox_pkey"},
		{Name: "produced", Type: "bytea", Binary: true, Exact: true, Nullable: true, PrimaryKey: "inbox_pkey"},
	}
}

func TestJudgeTable(t *testing.T) {
	table, err := Postgres().ParseTable("billing.inbox")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(c []TableColumn) []TableColumn) []TableColumn { return f(goodColumns()) }
	for _, tt := range []struct {
		name    string
		columns []TableColumn
		want    string // "" accepts
	}{
		{"the default schema", goodColumns(), ""},
		{"key columns in the other order", edit(func(c []TableColumn) []TableColumn {
			c[0].KeyPosition, c[1].KeyPosition = 2, 1
			return c
		}), ""},
		{"extra columns that are nullable or have a default", edit(func(c []TableColumn) []TableColumn {
			return append(c, TableColumn{Name: "tenant", Nullable: true}, TableColumn{Name: "n", HasDefault: true})
		}), ""},
		{"no table", nil, `sqlinbox: table "billing"."inbox" cannot guard against duplicates: it does not exist; ` +
			`write its migration with "watermill-inbox schema -format goose -dialect postgres -table billing.inbox -out DIR"`},
		{"no primary key", edit(func(c []TableColumn) []TableColumn {
			c[0].KeyPosition, c[1].KeyPosition = 0, 0
			return c
		}), "it has no primary key (a UNIQUE constraint or index is not one); want (consumer, message_id)"},
		{"primary key on message_id alone", edit(func(c []TableColumn) []TableColumn {
			c[0].KeyPosition, c[1].KeyPosition = 0, 1
			return c
		}), `sqlinbox: table "billing"."inbox" cannot guard against duplicates: its primary key is (message_id); want (consumer, message_id)`},
		{"primary key with a third column", edit(func(c []TableColumn) []TableColumn {
			c[2].KeyPosition = 3
			return c
		}), "its primary key is (consumer, message_id, processed_at); want (consumer, message_id)"},
		// The duplicate-key check compares the name the check read, whatever it is.
		{"a primary key of another name", edit(func(c []TableColumn) []TableColumn {
			for i := range c {
				c[i].PrimaryKey = "pk_billing_inbox"
			}
			return c
		}), ""},
		{"case-insensitive message_id", edit(func(c []TableColumn) []TableColumn {
			c[1].Type, c[1].Exact = "citext", false
			return c
		}), `column message_id is citext, which does not compare bytes exactly`},
		{"produced missing", edit(func(c []TableColumn) []TableColumn { return c[:4] }),
			"it has no column produced; want all of consumer, message_id, processed_at, payload_hash, produced, " +
				`which the table the migration of "watermill-inbox schema -format goose -dialect postgres -table billing.inbox -out DIR" creates has`},
		{"produced as text", edit(func(c []TableColumn) []TableColumn {
			c[4].Type, c[4].Binary = "text", false
			return c
		}), "column produced is text, which does not hold bytes as they are; want bytea"},
		{"processed_at without a default", edit(func(c []TableColumn) []TableColumn {
			c[2].HasDefault = false
			return c
		}), "column processed_at has no default"},
		{"an extra NOT NULL column without a default", edit(func(c []TableColumn) []TableColumn {
			return append(c, TableColumn{Name: "tenant"})
		}), "column tenant is NOT NULL without a default"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := judgeTable(Postgres(), table, tt.columns)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && !errors.Is(err, ErrTableMismatch):
				t.Errorf("err = %v, want ErrTableMismatch", err)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// The guard checks once, shares one check among concurrent messages, keeps a refusal for
// tableRecheckInterval, then checks again; an error that is no verdict is checked again at once.
func TestTableGuard(t *testing.T) {
	table := Table{Quoted: `"inbox"`}
	g := newTableGuard(nil)
	now := time.Unix(0, 0)
	g.now = func() time.Time { return now }
	var mu sync.Mutex
	checks := 0
	verdict := error(mismatchError("sqlinbox: table \"inbox\" cannot guard against duplicates: no"))
	check := func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		checks++
		return "pk_inbox", verdict
	}
	setVerdict := func(err error) { mu.Lock(); verdict = err; mu.Unlock() }
	ctx := context.Background()

	for range 5 {
		if err := g.before(ctx, table, check); !errors.Is(err, ErrTableMismatch) {
			t.Fatalf("err = %v, want ErrTableMismatch", err)
		}
	}
	if checks != 1 {
		t.Fatalf("%d checks within the interval, want 1", checks)
	}
	setVerdict(nil) // the table is fixed
	now = now.Add(tableRecheckInterval - time.Millisecond)
	if err := g.before(ctx, table, check); err == nil || checks != 1 {
		t.Fatalf("before the interval: err = %v after %d checks, want the refusal after 1", err, checks)
	}
	if key := g.table(table).PrimaryKey; key != "" {
		t.Fatalf("primary key %q before a check passed, want none", key)
	}
	now = now.Add(time.Millisecond)
	if err := g.before(ctx, table, check); err != nil || checks != 2 {
		t.Fatalf("after the interval: err = %v after %d checks, want nil after 2", err, checks)
	}
	if key := g.table(table).PrimaryKey; key != "pk_inbox" {
		t.Fatalf("primary key %q after the check passed, want the one it read", key)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := g.before(ctx, table, check); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if checks != 2 {
		t.Fatalf("%d checks after the table passed, want 2", checks)
	}

	// CheckTable's explicit check replaces the verdict both ways.
	setVerdict(mismatchError("refused"))
	if err := g.check(ctx, table, check); !errors.Is(err, ErrTableMismatch) {
		t.Fatalf("explicit check: %v", err)
	}
	if err := g.before(ctx, table, check); !errors.Is(err, ErrTableMismatch) || checks != 3 {
		t.Fatalf("after a refusing explicit check: err = %v after %d checks", err, checks)
	}

	// A catalog that cannot be read is no verdict: the next message checks again.
	g = newTableGuard(nil)
	setVerdict(errors.New("connection refused"))
	checks = 0
	for range 3 {
		if err := g.before(ctx, table, check); err == nil || errors.Is(err, ErrTableMismatch) {
			t.Fatalf("err = %v, want the connection error", err)
		}
	}
	if checks != 3 {
		t.Fatalf("%d checks after 3 unreadable catalogs, want 3", checks)
	}
}

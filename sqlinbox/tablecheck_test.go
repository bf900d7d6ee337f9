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
func goodColumns() []column {
	return []column{
		{name: "consumer", typ: "varchar(255)", keyPosition: 1, exact: true, primaryKey: "inbox_pkey"},
		{name: "message_id", typ: "varchar(255)", keyPosition: 2, exact: true, primaryKey: "inbox_pkey"},
		{name: "processed_at", typ: "timestamptz", temporal: true, hasDefault: true, primaryKey: "inbox_pkey"},
		{name: "payload_hash", typ: "bytea", binary: true, exact: true, nullable: true, primaryKey: "inbox_pkey"},
		{name: "produced", typ: "bytea", binary: true, exact: true, nullable: true, primaryKey: "inbox_pkey"},
	}
}

func TestJudgeTable(t *testing.T) {
	table, err := (Postgres{}).ParseTable("billing.inbox")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(c []column) []column) []column { return f(goodColumns()) }
	for _, tt := range []struct {
		name    string
		columns []column
		want    string // "" accepts
	}{
		{"the default schema", goodColumns(), ""},
		{"key columns in the other order", edit(func(c []column) []column {
			c[0].keyPosition, c[1].keyPosition = 2, 1
			return c
		}), ""},
		{"extra columns that are nullable or have a default", edit(func(c []column) []column {
			return append(c, column{name: "tenant", nullable: true}, column{name: "n", hasDefault: true})
		}), ""},
		{"no table", nil, `sqlinbox: table "billing"."inbox" cannot guard against duplicates: it does not exist; ` +
			`write its migration with "watermill-inbox schema -format goose -dialect postgres -table billing.inbox -out DIR"`},
		{"no primary key", edit(func(c []column) []column {
			c[0].keyPosition, c[1].keyPosition = 0, 0
			return c
		}), "it has no primary key (a UNIQUE constraint or index is not one); want (consumer, message_id)"},
		{"primary key on message_id alone", edit(func(c []column) []column {
			c[0].keyPosition, c[1].keyPosition = 0, 1
			return c
		}), `sqlinbox: table "billing"."inbox" cannot guard against duplicates: its primary key is (message_id); want (consumer, message_id)`},
		{"primary key with a third column", edit(func(c []column) []column {
			c[2].keyPosition = 3
			return c
		}), "its primary key is (consumer, message_id, processed_at); want (consumer, message_id)"},
		// The duplicate-key check compares the name the check read, whatever it is.
		{"a primary key of another name", edit(func(c []column) []column {
			for i := range c {
				c[i].primaryKey = "pk_billing_inbox"
			}
			return c
		}), ""},
		{"case-insensitive message_id", edit(func(c []column) []column {
			c[1].typ, c[1].exact = "citext", false
			return c
		}), `column message_id is citext, which does not compare bytes exactly`},
		{"produced missing", edit(func(c []column) []column { return c[:4] }),
			"it has no column produced; want all of consumer, message_id, processed_at, payload_hash, produced, " +
				`which the table the migration of "watermill-inbox schema -format goose -dialect postgres -table billing.inbox -out DIR" creates has`},
		{"produced as text", edit(func(c []column) []column {
			c[4].typ, c[4].binary = "text", false
			return c
		}), "column produced is text, which does not hold bytes as they are; want bytea"},
		{"processed_at without a default", edit(func(c []column) []column {
			c[2].hasDefault = false
			return c
		}), "column processed_at has no default"},
		{"an extra NOT NULL column without a default", edit(func(c []column) []column {
			return append(c, column{name: "tenant"})
		}), "column tenant is NOT NULL without a default"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := judgeTable(Postgres{}, table, tt.columns)
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
	g := newTableGuard(nil, table)
	now := time.Unix(0, 0)
	g.now = func() time.Time { return now }
	var mu sync.Mutex
	checks := 0
	verdict := error(mismatchError("sqlinbox: table \"inbox\" cannot guard against duplicates: no"))
	check := func(context.Context) (tableShape, error) {
		mu.Lock()
		defer mu.Unlock()
		checks++
		return tableShape{primaryKey: "pk_inbox"}, verdict
	}
	setVerdict := func(err error) { mu.Lock(); verdict = err; mu.Unlock() }
	ctx := context.Background()

	for range 5 {
		if err := g.before(ctx, g.passing(check)); !errors.Is(err, ErrTableMismatch) {
			t.Fatalf("err = %v, want ErrTableMismatch", err)
		}
	}
	if checks != 1 {
		t.Fatalf("%d checks within the interval, want 1", checks)
	}
	setVerdict(nil) // the table is fixed
	now = now.Add(tableRecheckInterval - time.Millisecond)
	if err := g.before(ctx, g.passing(check)); err == nil || checks != 1 {
		t.Fatalf("before the interval: err = %v after %d checks, want the refusal after 1", err, checks)
	}
	if key := g.withKey(table).PrimaryKey; key != "" {
		t.Fatalf("primary key %q before a check passed, want none", key)
	}
	now = now.Add(time.Millisecond)
	if err := g.before(ctx, g.passing(check)); err != nil || checks != 2 {
		t.Fatalf("after the interval: err = %v after %d checks, want nil after 2", err, checks)
	}
	if key := g.withKey(table).PrimaryKey; key != "pk_inbox" {
		t.Fatalf("primary key %q after the check passed, want the one it read", key)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := g.before(ctx, g.passing(check)); err != nil {
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
	if err := g.check(ctx, g.passing(check)); !errors.Is(err, ErrTableMismatch) {
		t.Fatalf("explicit check: %v", err)
	}
	if err := g.before(ctx, g.passing(check)); !errors.Is(err, ErrTableMismatch) || checks != 3 {
		t.Fatalf("after a refusing explicit check: err = %v after %d checks", err, checks)
	}

	// A catalog that cannot be read is no verdict: the next message checks again.
	g = newTableGuard(nil, table)
	setVerdict(errors.New("connection refused"))
	checks = 0
	for range 3 {
		if err := g.before(ctx, g.passing(check)); err == nil || errors.Is(err, ErrTableMismatch) {
			t.Fatalf("err = %v, want the connection error", err)
		}
	}
	if checks != 3 {
		t.Fatalf("%d checks after 3 unreadable catalogs, want 3", checks)
	}
}

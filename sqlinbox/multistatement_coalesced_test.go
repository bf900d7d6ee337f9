package sqlinbox

import "testing"

// A queued statement goes into a coalesced request only if it is one statement however the
// server reads its quotes and comments: with or without backslash escapes, whatever follows
// "--".
func TestOneStatement(t *testing.T) {
	for _, c := range []struct {
		text string
		one  bool
	}{
		{"INSERT INTO invoices (id, cents) VALUES (?, ?)", true},
		{"INSERT INTO invoices (id, cents) VALUES (?, ?);", true},
		{"-- name: CreateInvoice :exec\nINSERT INTO invoices (note) VALUES ('it''s paid')", true},
		{"UPDATE t SET a = 1 # done", true},
		{"UPDATE t SET a = 1 -- done", true},
		{"UPDATE t SET a = 1 /* a comment */ WHERE id = ?", true},
		{"INSERT INTO t VALUES ('a', \"b\", `c`)", true},
		{"UPDATE a SET x = 1; UPDATE b SET x = 1", false},
		{"INSERT INTO t VALUES ('a;b')", false},
		{"UPDATE t SET a = 1 /* open", false},
		{"INSERT INTO t VALUES ('open)", false},
		{`INSERT INTO t VALUES ('a\')`, false},  // open with backslash escapes
		{`INSERT INTO t VALUES ('a\'')`, false}, // open without them
		{"UPDATE t SET a = 1 /*!50000 , b = 2 */", false},
		{"UPDATE t SET a = 1 /*M!100000 , b = 2 */", false},
		{"UPDATE t SET a = 1--'", false},          // "--'" is no comment: the quote is open
		{"UPDATE t SET a = 1 --\x01 '\n'", false}, // after a control byte the server may read a comment
		{"UPDATE t SET a = 1 -- it's\nWHERE id = 2", true},
	} {
		if got := oneStatement(c.text); got != c.one {
			t.Errorf("oneStatement(%q) = %v, want %v", c.text, got, c.one)
		}
	}
}

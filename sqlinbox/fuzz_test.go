package sqlinbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// FuzzTableNameIsOnlyIdentifiers checks the one piece of text the inbox puts into SQL: a
// table name that ValidateTableName accepts is one or two parts joined by a dot, each made of
// [A-Za-z0-9_] only, 1-63 bytes, not starting with a digit; everything else is rejected with
// ErrInvalidTableName. Each dialect's ParseTable and SchemaSQL agree with ValidateTableName
// (SQLite's refuse every schema, main's too), quoting wraps each part in the dialect's quote
// without ever putting a quote inside a part, and the DDL creates the quoted table, after its
// quoted schema where the name has one.
//
// Seeds are in testdata/fuzz/FuzzTableNameIsOnlyIdentifiers; run it with
//
//	go test -run '^$' -fuzz '^FuzzTableNameIsOnlyIdentifiers$' -fuzztime 10s ./sqlinbox
func FuzzTableNameIsOnlyIdentifiers(f *testing.F) {
	for _, seed := range []string{
		"inbox", "billing.inbox", "_x", "A_b_9", "", ".", "a.b.c", "1inbox", `in"box`, "in`box",
		"inbox; DROP TABLE users", "inbóx", "inbox\x00", strings.Repeat("t", 63), strings.Repeat("t", 64),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := sqlinbox.ValidateTableName(name)
		want := referenceTableName(name)
		if (err == nil) != want {
			t.Fatalf("ValidateTableName(%q) = %v, but the reference rule says valid=%v", name, err, want)
		}
		if err != nil && !errors.Is(err, sqlinbox.ErrInvalidTableName) {
			t.Fatalf("ValidateTableName(%q) = %v, want an error wrapping ErrInvalidTableName", name, err)
		}

		for _, d := range []struct {
			dialect sqlinbox.Dialect
			quote   string
			// schemas: a qualified name is valid (SQLite has no schemas), and createSchema
			// begins its DDL, before the quoted schema.
			schemas      bool
			createSchema string
		}{
			{sqlinbox.Postgres{}, `"`, true, "DO $$ BEGIN\n\tIF to_regnamespace('"}, {sqlinbox.SQLite{}, `"`, false, ""},
			{sqlinbox.MySQL{}, "`", true, "CREATE DATABASE IF NOT EXISTS "},
		} {
			err := err
			if _, _, qualified := strings.Cut(name, "."); err == nil && qualified && !d.schemas {
				err = errors.New("a schema the dialect has not")
			}
			table, qErr := d.dialect.ParseTable(name)
			quoted := table.Quoted
			if (qErr == nil) != (err == nil) {
				t.Fatalf("%s: ParseTable(%q) err = %v, want valid=%v", d.dialect.Name(), name, qErr, err == nil)
			}
			ddl, dErr := sqlinbox.SchemaSQL(d.dialect, name)
			if (dErr == nil) != (err == nil) {
				t.Fatalf("%s: SchemaSQL(%q) err = %v, want valid=%v", d.dialect.Name(), name, dErr, err == nil)
			}
			if err != nil {
				if !errors.Is(qErr, sqlinbox.ErrInvalidTableName) || !errors.Is(dErr, sqlinbox.ErrInvalidTableName) {
					t.Fatalf("%s: %q: ParseTable err = %v, SchemaSQL err = %v, want ErrInvalidTableName",
						d.dialect, name, qErr, dErr)
				}
				continue
			}
			parts := strings.Split(name, ".")
			quotedParts := strings.Split(quoted, ".")
			if len(quotedParts) != len(parts) {
				t.Fatalf("%s: ParseTable(%q) = %q: %d parts, want %d", d.dialect.Name(), name, quoted, len(quotedParts), len(parts))
			}
			for i, qp := range quotedParts {
				inner, ok := strings.CutPrefix(qp, d.quote)
				if ok {
					inner, ok = strings.CutSuffix(inner, d.quote)
				}
				if !ok || inner != parts[i] {
					t.Fatalf("%s: ParseTable(%q) = %q: part %q is not %s%s%s", d.dialect.Name(), name, quoted, qp, d.quote, parts[i], d.quote)
				}
				if strings.ContainsAny(inner, "\"`'") {
					t.Fatalf("%s: ParseTable(%q) = %q: a quote inside part %q", d.dialect.Name(), name, quoted, inner)
				}
			}
			if len(parts) == 2 {
				schema, rest, ok := strings.Cut(ddl, ";\nCREATE TABLE ")
				if !ok || !strings.HasPrefix(schema, d.createSchema+quotedParts[0]) {
					t.Fatalf("%s: SchemaSQL(%q) does not create the quoted schema %s first: %.80q", d.dialect.Name(), name, quotedParts[0], ddl)
				}
				ddl = "CREATE TABLE " + rest
			}
			if !strings.HasPrefix(ddl, "CREATE TABLE IF NOT EXISTS "+quoted+" (") {
				t.Fatalf("%s: SchemaSQL(%q) does not create the quoted name %q: %.80q", d.dialect.Name(), name, quoted, ddl)
			}
		}
	})
}

// referenceTableName is the rule ValidateTableName documents, written independently.
func referenceTableName(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if len(p) == 0 || len(p) > 63 || ('0' <= p[0] && p[0] <= '9') {
			return false
		}
		for _, c := range []byte(p) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
				return false
			}
		}
	}
	return true
}

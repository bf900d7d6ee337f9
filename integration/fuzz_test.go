package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// FuzzKeyClaimedOnceOrRejected sends any string as a message UUID (the default key) through
// the middleware to a real store (SQLite in a temporary directory). Either the key is
// rejected before anything is claimed, with ErrInvalidKey, exactly when the documented rules
// say so, or it is claimed exactly once: the handler runs once, sees the key unchanged through KeyFromContext, the inbox row holds the same bytes,
// and a second delivery is a duplicate.
//
// Seeds are in testdata/fuzz/FuzzKeyClaimedOnceOrRejected; run it with
//
//	go test -run '^$' -fuzz '^FuzzKeyClaimedOnceOrRejected$' -fuzztime 10s ./integration/
func FuzzKeyClaimedOnceOrRejected(f *testing.F) {
	for _, seed := range []string{
		"", "order-1", "é", "\x00", "a\x00b", "\xff", "\xc3\x28", strings.Repeat("k", inbox.MaxKeyLength),
		strings.Repeat("k", inbox.MaxKeyLength+1), strings.Repeat("é", inbox.MaxKeyLength/2) + "x", "'; DROP TABLE inbox; --",
		" ", "A", "a", "\U0010FFFF", "\uFEFF", "a\nb", "\x1b[2J", "\x7f", "\u0085", "\u00a0",
	} {
		f.Add(seed)
	}

	dsn := "file:" + filepath.Join(f.TempDir(), "fuzz.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	store, err := sqlinbox.NewDB(db, sqlinbox.SQLite{}, sqlinbox.Config{})
	if err != nil {
		f.Fatal(err)
	}
	if err := store.InitializeSchema(context.Background()); err != nil {
		f.Fatal(err)
	}
	var consumers atomic.Int64

	f.Fuzz(func(t *testing.T, key string) {
		// A consumer of its own, so that a key seen in an earlier run is new again.
		consumer := fmt.Sprintf("fuzz_%d", consumers.Add(1))
		mw, err := inbox.NewMiddleware(store, inbox.Config{Consumer: consumer}, nil)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		var seen string
		h := mw(func(msg *message.Message) ([]*message.Message, error) {
			runs++
			k, ok := inbox.KeyFromContext(msg.Context())
			if !ok {
				return nil, errors.New("no key in the handler's context")
			}
			seen = k
			return nil, nil
		})

		_, err = h(message.NewMessage(key, nil))
		wantReject := referenceKeyRejection(key)
		if err != nil {
			if wantReject == nil {
				t.Fatalf("key %q rejected with %v, but the rules accept it", key, err)
			}
			if !errors.Is(err, wantReject) {
				t.Fatalf("key %q: err = %v, want one wrapping %v", key, err, wantReject)
			}
			if runs != 0 {
				t.Fatalf("key %q rejected, yet the handler ran", key)
			}
			if n := countRows(t, db, "SELECT COUNT(*) FROM inbox WHERE consumer = ?", consumer); n != 0 {
				t.Fatalf("key %q rejected, yet %d rows claimed", key, n)
			}
			return
		}
		if wantReject != nil {
			t.Fatalf("key %q accepted, but the rules reject it with %v", key, wantReject)
		}
		if runs != 1 || seen != key {
			t.Fatalf("key %q: handler ran %d times and saw key %q", key, runs, seen)
		}
		var stored []byte
		if err := db.QueryRow("SELECT CAST(message_id AS BLOB) FROM inbox WHERE consumer = ?", consumer).Scan(&stored); err != nil {
			t.Fatalf("key %q: reading the claim: %v", key, err)
		}
		if string(stored) != key {
			t.Fatalf("key %q stored as %q", key, stored)
		}

		if _, err := h(message.NewMessage(key, nil)); err != nil {
			t.Fatalf("key %q, second delivery: %v", key, err)
		}
		if runs != 1 {
			t.Fatalf("key %q: the second delivery ran the handler again", key)
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM inbox WHERE consumer = ?", consumer); n != 1 {
			t.Fatalf("key %q: %d claims, want 1", key, n)
		}
	})
}

// referenceKeyRejection is the documented key rule, written independently of the library.
func referenceKeyRejection(key string) error {
	switch {
	case key == "":
		return inbox.ErrInvalidKey
	case len(key) > inbox.MaxKeyLength:
		return inbox.ErrInvalidKey
	case !utf8.ValidString(key):
		return inbox.ErrInvalidKey
	}
	for _, r := range key {
		if unicode.Is(unicode.Cc, r) { // C0, DEL and C1: the control characters of Unicode
			return inbox.ErrInvalidKey
		}
	}
	return nil
}

func countRows(t *testing.T, db *sql.DB, query string, args ...any) (n int) {
	t.Helper()
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// TestSQLInMessageFieldsIsNeverExecuted puts SQL in every field of a message (UUID, payload,
// metadata keys and values), in the consumer name, in a key taken from metadata, and in the
// messages the handler returns (which the inbox stores with the claim and hands back for a
// duplicate). On every store, in both modes, none of it runs: a canary table and its row
// survive, the inbox and business tables hold exactly one row per message, and the stored
// outputs come back byte for byte. The same values on MySQL connections in the character
// sets that undo client-side escaping, and under NO_BACKSLASH_ESCAPES: charset_test.go.
func TestSQLInMessageFieldsIsNeverExecuted(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		t.Run(modeName(writeBehind), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) { testSQLInMessageFields(t, b, writeBehind) })
		})
	}
}

func modeName(writeBehind bool) string {
	if writeBehind {
		return "write-behind"
	}
	return "claim-first"
}

// newCanary creates a table with one row, which no hostile value may touch.
func newCanary(t *testing.T, b *backend) string {
	t.Helper()
	ctx := context.Background()
	canary := testenv.Name("canary")
	mustExec(t, b.direct, "CREATE TABLE "+canary+" (v INT NOT NULL)")
	t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+canary) })
	mustExec(t, b.direct, "INSERT INTO "+canary+" (v) VALUES (1)")
	return canary
}

// checkCanary fails t unless canary still holds its one row.
func checkCanary(t *testing.T, b *backend, canary string) {
	t.Helper()
	v, err := b.direct.count(context.Background(), "SELECT v FROM "+canary)
	if err != nil || v != 1 {
		t.Errorf("canary table %s: v = %d, err = %v; want 1 and no error", canary, v, err)
	}
	wantRows(t, "canary rows", b.rows(t, canary, ""), 1)
}

// hostileValues are the strings the tests put in every field of a message: SQL that ends a
// string or identifier and runs, and, for the MySQL connections in GBK, SJIS, CP932 and
// BIG5, valid UTF-8 whose last byte makes one character with the backslash that
// client-side escaping puts before a quote (U+0801 in GBK, U+0101 in SJIS and CP932, U+0821
// in BIG5), followed by SQL that drops the canary, empties the inbox or plants a claim.
// (U+0081 breaks out in SJIS and CP932 too, but it is a control character, which a key may
// not hold: U+0101 ends in the same byte.)
func hostileValues(b *backend, canary string) []string {
	values := []string{
		"'; DROP TABLE " + canary + "; --",
		`"; DROP TABLE ` + canary + "; --",
		"`; DROP TABLE " + canary + "; --",
		"'); DELETE FROM " + b.table + "; --",
		`\'; DROP TABLE ` + b.business + "; --",
		"$$; DROP TABLE " + canary + "; $$",
		"1; UPDATE " + canary + " SET v = 2",
		"' OR '1'='1",
		"x' ON CONFLICT DO NOTHING; DELETE FROM " + b.table + "; --",
		"'||(SELECT v FROM " + canary + ")||'",
		"?", "$1", "%s%s%s", "/*", "*/", "--", ";",
	}
	for _, lead := range []string{"\u0801", "\u0101", "\u0821", "中"} {
		values = append(values,
			lead+"'); DROP TABLE "+canary+"; -- ",
			lead+"', NULL); DROP TABLE "+canary+"; -- ",
			lead+"'); INSERT INTO "+b.table+" (consumer, message_id) VALUES ('billing', 'victim-1'); -- ",
			lead+"'), ('billing', 'victim-2'); -- ",
		)
	}
	return values
}

// testSQLInMessageFields runs every hostile value through b's store in one mode: none runs,
// and each is stored and returned byte for byte.
func testSQLInMessageFields(t *testing.T, b *backend, writeBehind bool) {
	canary := newCanary(t, b)
	attacks := hostileValues(b, canary)
	consumers := hostileConsumers(canary)

	for _, c := range consumers {
		runs := 0
		h := hostileHandler(t, b, c.name, c.key, writeBehind, &runs)

		for _, attack := range attacks {
			msg := attackMessage(attack, attack)
			msg.Metadata.Set("order_id", attack+" (metadata)")
			key := attack
			if c.key != nil {
				key = attack + " (metadata)"
			}
			for delivery := 1; delivery <= 2; delivery++ {
				redelivered := message.NewMessage(msg.UUID, msg.Payload)
				redelivered.Metadata = maps.Clone(msg.Metadata)
				before := runs
				out, err := h(redelivered)
				if err != nil {
					t.Fatalf("consumer %q, key %q, delivery %d: %v", c.name, key, delivery, err)
				}
				wantRuns := before // a duplicate skips the handler, but in write-behind mode
				if delivery == 1 || writeBehind {
					wantRuns++
				}
				if runs != wantRuns {
					t.Errorf("consumer %q, key %q, delivery %d: handler ran %d times, want %d", c.name, key, delivery, runs-before, wantRuns-before)
				}
				want := attackMessage(attack+"/out", attack)
				if len(out) != 1 || out[0].UUID != want.UUID || string(out[0].Payload) != string(want.Payload) ||
					!maps.Equal(out[0].Metadata, want.Metadata) {
					t.Errorf("consumer %q, key %q, delivery %d: handler outputs %s, want %s", c.name, key, delivery, describe(out), describe([]*message.Message{want}))
				}
			}
			wantRows(t, fmt.Sprintf("consumer %q: claims of %q", c.name, key), b.claims(t, c.name, key), 1)
			wantRows(t, fmt.Sprintf("consumer %q: invoices of %q", c.name, key), b.invoices(t, c.name, key), 1)
		}
	}

	// The canary table and its row are intact; nothing but the claims and invoices was
	// written.
	checkCanary(t, b, canary)
	total := len(attacks) * len(consumers)
	wantRows(t, "inbox rows", b.rows(t, b.table, ""), total)
	wantRows(t, "invoices", b.rows(t, b.business, ""), total)
}

// hostileConsumers are the consumers hostile values are delivered to: a plain one, one
// whose name is SQL, and one whose key comes from metadata.
func hostileConsumers(canary string) []hostileConsumer {
	return []hostileConsumer{
		{"billing", nil},
		{"billing'; DROP TABLE " + canary + "; --", nil},
		{"by_metadata_key", func(msg *message.Message) (string, error) { return msg.Metadata.Get("order_id"), nil }},
	}
}

type hostileConsumer struct {
	name string
	key  func(*message.Message) (string, error)
}

// hostileHandler is consumer's handler on b's store in one mode: it writes an invoice of the
// message's key with the key as a parameter (through the transaction, or queued in
// write-behind mode) and returns a message holding the payload. runs counts its runs.
func hostileHandler(t *testing.T, b *backend, consumer string, key func(*message.Message) (string, error), writeBehind bool, runs *int) message.HandlerFunc {
	t.Helper()
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer, Key: key, WriteBehind: writeBehind}, nil)
	if err != nil {
		t.Fatal(err)
	}
	insert := b.placeholders("INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)")
	return mw(func(msg *message.Message) ([]*message.Message, error) {
		*runs++
		ctx := msg.Context()
		key, _ := inbox.KeyFromContext(ctx)
		if writeBehind {
			if err := inbox.ExecAtCommit(ctx, insert, consumer, key); err != nil {
				return nil, err
			}
		} else {
			r, ok := b.inTx(ctx)
			if !ok {
				return nil, errors.New("no inbox transaction in the handler's context")
			}
			if err := r.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", consumer, key); err != nil {
				return nil, err
			}
		}
		return []*message.Message{attackMessage(msg.UUID+"/out", string(msg.Payload))}, nil
	})
}

// attackMessage is a message with sql in its UUID, payload, and metadata keys and values.
func attackMessage(uuid, sql string) *message.Message {
	msg := message.NewMessage(uuid, []byte(sql))
	msg.Metadata.Set(sql, sql)
	msg.Metadata.Set("note", "'; DROP TABLE inbox; --")
	return msg
}

func describe(msgs []*message.Message) string {
	s := "["
	for _, m := range msgs {
		payload := fmt.Sprintf("%q", m.Payload)
		if len(m.Payload) > 64 {
			payload = fmt.Sprintf("%d bytes %q...", len(m.Payload), m.Payload[:16])
		}
		s += fmt.Sprintf("{uuid %q, payload %s, metadata %q}", m.UUID, payload, m.Metadata)
	}
	return s + "]"
}

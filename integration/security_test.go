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
// duplicate). On every store none of it runs: a canary table and its row survive, the inbox
// and business tables hold exactly one row per message, and the stored outputs come back
// byte for byte.
func TestSQLInMessageFieldsIsNeverExecuted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		canary := testenv.Name("canary")
		mustExec(t, b.direct, "CREATE TABLE "+canary+" (v INT NOT NULL)")
		t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+canary) })
		mustExec(t, b.direct, "INSERT INTO "+canary+" (v) VALUES (1)")

		attacks := []string{
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
		consumers := []struct {
			name string
			key  func(*message.Message) (string, error)
		}{
			{"billing", nil},
			{"billing'; DROP TABLE " + canary + "; --", nil},
			{"by_metadata_key", func(msg *message.Message) (string, error) { return msg.Metadata.Get("order_id"), nil }},
		}

		for _, c := range consumers {
			runs := 0
			mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: c.name, Key: c.key}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				runs++
				ctx := msg.Context()
				key, _ := inbox.KeyFromContext(ctx)
				r, ok := b.inTx(ctx)
				if !ok {
					return nil, errors.New("no inbox transaction in the handler's context")
				}
				if err := r.exec(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", c.name, key); err != nil {
					return nil, err
				}
				return []*message.Message{attackMessage(msg.UUID+"/out", string(msg.Payload))}, nil
			})

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
					wantRuns := before // a duplicate skips the handler
					if delivery == 1 {
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
		v, err := b.direct.count(ctx, "SELECT v FROM "+canary)
		if err != nil || v != 1 {
			t.Errorf("canary table %s: v = %d, err = %v; want 1 and no error", canary, v, err)
		}
		wantRows(t, "canary rows", b.rows(t, canary, ""), 1)
		total := len(attacks) * len(consumers)
		wantRows(t, "inbox rows", b.rows(t, b.table, ""), total)
		wantRows(t, "invoices", b.rows(t, b.business, ""), total)
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

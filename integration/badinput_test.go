package integration

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Bad input, on every store: every message either gets a clear error (the router nacks it)
// with nothing claimed and nothing written, or is processed exactly as a normal message.
// Never is a message acked without its claim committed.

// badInputCase is one message and what the handler does after writing its invoice.
type badInputCase struct {
	name string
	// msg builds the message; its UUID is the key.
	msg func() *message.Message
	// after runs in the handler after the invoice INSERT; cancel cancels the message context.
	after func(ctx context.Context, cancel context.CancelFunc, msg *message.Message) error
	// wantErr is what the first delivery returns (errors.Is); nil: it succeeds.
	wantErr error
	// anyErr: the first delivery must fail, with any error.
	anyErr bool
	// committed: the first delivery's claim and invoice are committed (even if it failed).
	committed bool
	// redelivery: "processed" (the handler runs and commits), "duplicate" (acked, handler
	// skipped, or in write-behind mode run with its writes discarded), or "rejected" (fails
	// again with wantErr).
	redelivery string
	// needsTx: the case is about the handler's transaction, which write-behind mode has not.
	needsTx bool
}

var errAfterWrite = errors.New("handler failed after writing its invoice")

var oddMetadata = message.Metadata{
	"":                           "empty key",
	"_watermill_message_uuid":    "not-the-uuid",
	"inbox":                      "x",
	"inbox_key":                  "another-key",
	"inbox_consumer":             "another-consumer",
	"idempotency_key":            "other",
	"consumer":                   "other",
	"message_id":                 "other",
	"fingerprint":                "00",
	"produced":                   "[]",
	"key with spaces\nand lines": "value\x00with NUL",
	"\xff\xfe":                   "\xff invalid UTF-8 value",
	strings.Repeat("k", 1024):    strings.Repeat("v", 10<<10),
}

func badInputCases() []badInputCase {
	return []badInputCase{
		{
			name: "empty UUID is ErrInvalidKey", msg: func() *message.Message { return message.NewMessage("", []byte("{}")) },
			wantErr: inbox.ErrInvalidKey, redelivery: "rejected",
		},
		{
			name:    "10 KB UUID is ErrInvalidKey",
			msg:     func() *message.Message { return message.NewMessage(strings.Repeat("k", 10<<10), []byte("{}")) },
			wantErr: inbox.ErrInvalidKey, redelivery: "rejected",
		},
		{
			name:    "invalid UTF-8 UUID is ErrInvalidKey",
			msg:     func() *message.Message { return message.NewMessage("order-\xc3\x28-\xff", []byte("{}")) },
			wantErr: inbox.ErrInvalidKey, redelivery: "rejected",
		},
		{
			name:    "UUID with a NUL byte is ErrInvalidKey",
			msg:     func() *message.Message { return message.NewMessage("order\x00"+watermill.NewUUID(), []byte("{}")) },
			wantErr: inbox.ErrInvalidKey, redelivery: "rejected",
		},
		{
			name:    "UUID with a control character is ErrInvalidKey",
			msg:     func() *message.Message { return message.NewMessage("order\n\x1b[2J"+watermill.NewUUID(), []byte("{}")) },
			wantErr: inbox.ErrInvalidKey, redelivery: "rejected",
		},
		{
			name: "odd metadata keys and values do not disturb processing",
			msg: func() *message.Message {
				msg := message.NewMessage(watermill.NewUUID(), []byte("{}"))
				msg.Metadata = maps.Clone(oddMetadata)
				return msg
			},
			after: func(_ context.Context, _ context.CancelFunc, msg *message.Message) error {
				if !maps.Equal(msg.Metadata, oddMetadata) {
					return fmt.Errorf("the handler saw metadata %q, want %q", msg.Metadata, oddMetadata)
				}
				return nil
			},
			committed: true, redelivery: "duplicate",
		},
		{
			name:      "nil payload is processed normally",
			msg:       func() *message.Message { return message.NewMessage(watermill.NewUUID(), nil) },
			committed: true, redelivery: "duplicate",
		},
		{
			name: "handler error after writing rolls back",
			msg:  func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("{}")) },
			after: func(context.Context, context.CancelFunc, *message.Message) error {
				return errAfterWrite
			},
			wantErr: errAfterWrite, redelivery: "processed",
		},
		{
			name: "handler that commits the inbox transaction is ErrTxEndedByHandler",
			msg:  func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("{}")) },
			after: func(ctx context.Context, _ context.CancelFunc, _ *message.Message) error {
				return endInboxTx(ctx, true)
			},
			wantErr: inbox.ErrTxEndedByHandler, committed: true, redelivery: "duplicate", needsTx: true,
		},
		{
			name: "handler that rolls back the inbox transaction is ErrTxEndedByHandler",
			msg:  func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("{}")) },
			after: func(ctx context.Context, _ context.CancelFunc, _ *message.Message) error {
				return endInboxTx(ctx, false)
			},
			wantErr: inbox.ErrTxEndedByHandler, redelivery: "processed", needsTx: true,
		},
		{
			name: "context cancelled mid-handler, handler returns the context error",
			msg:  func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("{}")) },
			after: func(ctx context.Context, cancel context.CancelFunc, _ *message.Message) error {
				cancel()
				return ctx.Err()
			},
			wantErr: context.Canceled, redelivery: "processed",
		},
		{
			// A subscriber that closes cancels the context, possibly after the handler's
			// work is done: the middleware, not the context, decides, so the success commits
			// (and a database/sql transaction is not rolled back by the driver underneath).
			name: "context cancelled mid-handler, handler ignores it and returns nil, commits",
			msg:  func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte("{}")) },
			after: func(_ context.Context, cancel context.CancelFunc, _ *message.Message) error {
				cancel()
				return nil
			},
			committed: true, redelivery: "duplicate",
		},
	}
}

// TestBadInputIsNackedOrProcessedNormally runs every bad-input case on every store, in both
// modes.
func TestBadInputIsNackedOrProcessedNormally(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		t.Run(map[bool]string{false: "claim-first", true: "write-behind"}[writeBehind], func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) { testBadInput(t, b, writeBehind) })
		})
	}
}

func testBadInput(t *testing.T, b *backend, writeBehind bool) {
	for i, tc := range badInputCases() {
		if tc.needsTx && writeBehind {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			consumer := fmt.Sprintf("bad_input_%d", i)
			runs := 0
			mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer, WriteBehind: writeBehind}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var cancel context.CancelFunc
			var after func(context.Context, context.CancelFunc, *message.Message) error
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				runs++
				ctx := msg.Context()
				if key, ok := inbox.KeyFromContext(ctx); !ok || key != msg.UUID {
					return nil, fmt.Errorf("KeyFromContext = %q, %v; want the UUID %q", key, ok, msg.UUID)
				}
				insert := "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (?, ?)"
				r, ok := b.inTx(ctx)
				switch {
				case writeBehind && ok:
					return nil, errors.New("a transaction in a write-behind handler's context")
				case writeBehind:
					if err := inbox.ExecAtCommit(ctx, b.placeholders(insert), consumer, msg.UUID); err != nil {
						return nil, err
					}
				case !ok:
					return nil, errors.New("no inbox transaction in the handler's context")
				default:
					if err := r.exec(ctx, insert, consumer, msg.UUID); err != nil {
						return nil, err
					}
				}
				if after != nil {
					return nil, after(ctx, cancel, msg)
				}
				return nil, nil
			})

			// First delivery, in a context the case may cancel.
			msg := tc.msg()
			ctx, c := context.WithCancel(context.Background())
			defer c()
			cancel, after = c, tc.after
			msg.SetContext(ctx)
			_, err = h(msg)
			claims := b.rows(t, b.table, "WHERE consumer = ?", consumer)
			invoices := b.rows(t, b.business, "WHERE consumer = ?", consumer)
			switch {
			case err == nil && (tc.wantErr != nil || tc.anyErr):
				t.Fatalf("first delivery acked (nil error), want %v; claims %d, invoices %d", tc.wantErr, claims, invoices)
			case err != nil && tc.wantErr == nil && !tc.anyErr:
				t.Fatalf("first delivery: %v, want success", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("first delivery: err = %v, want one wrapping %v", err, tc.wantErr)
			}
			if err != nil {
				t.Logf("nack: %v", err)
			}
			if err == nil && claims != 1 {
				t.Fatalf("acked with %d claims: an ack without a claim", claims)
			}
			want := 0
			if tc.committed {
				want = 1
			}
			wantRows(t, "claims after the first delivery", claims, want)
			wantRows(t, "invoices after the first delivery", invoices, want)

			// Redelivery, as the broker does after a nack (or again after an ack).
			runsBefore := runs
			after = nil
			redelivered := message.NewMessage(msg.UUID, msg.Payload)
			redelivered.Metadata = maps.Clone(msg.Metadata)
			_, err = h(redelivered)
			switch tc.redelivery {
			case "rejected":
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("redelivery: err = %v, want %v", err, tc.wantErr)
				}
				if runs != runsBefore {
					t.Errorf("the handler ran for a rejected key")
				}
				wantRows(t, "claims after the redelivery", b.rows(t, b.table, "WHERE consumer = ?", consumer), 0)
				wantRows(t, "invoices after the redelivery", b.rows(t, b.business, "WHERE consumer = ?", consumer), 0)
			case "processed", "duplicate":
				if err != nil {
					t.Fatalf("redelivery: %v", err)
				}
				wantRuns := runsBefore + 1
				if tc.redelivery == "duplicate" && !writeBehind {
					wantRuns = runsBefore
				}
				if runs != wantRuns {
					t.Errorf("handler runs after the redelivery: %d, want %d", runs, wantRuns)
				}
				wantRows(t, "claims after the redelivery", b.claims(t, consumer, msg.UUID), 1)
				wantRows(t, "invoices after the redelivery", b.invoices(t, consumer, msg.UUID), 1)
			default:
				t.Fatalf("unknown redelivery %q", tc.redelivery)
			}
		})
	}
}

// endInboxTx commits or rolls back the inbox transaction from inside the handler, which the
// transaction's owner (the middleware) must notice.
func endInboxTx(ctx context.Context, commit bool) error {
	if tx, ok := inbox.TxFromContext[pgx.Tx](ctx); ok {
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}
	if tx, ok := inbox.TxFromContext[*sql.Tx](ctx); ok {
		if commit {
			return tx.Commit()
		}
		return tx.Rollback()
	}
	return errors.New("no inbox transaction of a known driver in the context")
}

// TestProducedMessagesComeBackByteForByteOnDuplicate: the messages a handler returns are
// stored with the claim and returned again for a duplicate, so that the router republishes
// them. Whatever bytes their UUID, metadata and payload hold (invalid UTF-8, NUL, an empty
// metadata key, Watermill's own header names, binary payloads) must come back unchanged:
// downstream consumers deduplicate by UUID, and a changed UUID is a new message.
func TestProducedMessagesComeBackByteForByteOnDuplicate(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	produced := func() []*message.Message {
		odd := message.NewMessage("out-\xff\xfe-invalid-utf8", binary)
		odd.Metadata = message.Metadata{
			"\xff":                    "\xc3\x28",
			"":                        "empty key",
			"nul":                     "a\x00b",
			"_watermill_message_uuid": "not-the-uuid",
		}
		return []*message.Message{
			odd,
			message.NewMessage("out-nil-payload", nil),
			message.NewMessage("out-plain", []byte(`{"invoice":1}`)),
		}
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := mw(func(*message.Message) ([]*message.Message, error) { return produced(), nil })
		in := message.NewMessage(watermill.NewUUID(), []byte("{}"))
		if _, err := h(in); err != nil {
			t.Fatal(err)
		}
		again, err := h(message.NewMessage(in.UUID, in.Payload))
		if err != nil {
			t.Fatalf("duplicate: %v", err)
		}
		want := produced()
		if len(again) != len(want) {
			t.Fatalf("duplicate returned %d messages, want %d", len(again), len(want))
		}
		for i := range want {
			got := again[i]
			if got.UUID != want[i].UUID || !bytes.Equal(got.Payload, want[i].Payload) || !maps.Equal(got.Metadata, want[i].Metadata) {
				t.Errorf("message %d came back as %s, want %s", i, describe([]*message.Message{got}), describe(want[i:i+1]))
			}
		}
	})
}

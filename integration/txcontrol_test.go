package integration

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// A handler that ends the inbox transaction itself (ROLLBACK, COMMIT, START TRANSACTION, a
// MySQL statement that commits implicitly) is a failure wrapping inbox.ErrTxEndedByHandler,
// never an ack, on every store in every mode; rows counted from another session. What the
// store sends for the handler is refused before it is sent, so nothing of it commits; a
// database/sql handler's own statement on its *sql.Tx reaches the database without the store,
// and the check before COMMIT finds the transaction ended.

// txControlBackends are the stores: forEachBackend's and the pipelined one.
func txControlBackends(t *testing.T, test func(t *testing.T, b *backend)) {
	forEachBackend(t, test)
	t.Run("pgx/postgres/pipeline", func(t *testing.T) { test(t, pipelineBackend(t, sqlinbox.PipelineConfig{})) })
}

// txControlCase is one handler that ends its transaction.
type txControlCase struct {
	name string
	// queued: the statements go through inbox.ExecAtCommit (both modes), else through the
	// handler's transaction (claim-first only); "INSERT n" inserts invoice n, "FAIL" fails.
	queued     bool
	statements []string
	mysqlOnly  bool
}

var txControlCases = []txControlCase{
	{"queued ROLLBACK between two inserts", true, []string{"INSERT 1", "ROLLBACK", "INSERT 2"}, false},
	{"queued COMMIT, then a failing insert", true, []string{"INSERT 1", "COMMIT", "FAIL"}, false},
	{"queued START TRANSACTION", true, []string{"INSERT 1", "START TRANSACTION", "INSERT 2"}, false},
	{"queued text of two statements ending in COMMIT", true, []string{"INSERT 1", "INSERT 2; COMMIT"}, false},
	{"queued DDL (an implicit commit)", true, []string{"INSERT 1", "CREATE TABLE %s_ddl (a INT)", "INSERT 2"}, true},
	{"ROLLBACK on the transaction between two inserts", false, []string{"INSERT 1", "ROLLBACK", "INSERT 2"}, false},
	{"COMMIT on the transaction, then a failing insert", false, []string{"INSERT 1", "COMMIT", "FAIL"}, false},
	{"START TRANSACTION on the transaction (MySQL commits implicitly)", false, []string{"INSERT 1", "START TRANSACTION", "INSERT 2"}, true},
	{"DDL on the transaction (MySQL commits implicitly)", false, []string{"INSERT 1", "CREATE TABLE %s_ddl (a INT)", "INSERT 2"}, true},
}

func TestHandlerEndingItsTransactionIsNeverAcked(t *testing.T) {
	for _, writeBehind := range []bool{false, true} {
		t.Run(modeName(writeBehind), func(t *testing.T) {
			txControlBackends(t, func(t *testing.T, b *backend) {
				mysql := b.dialect.Name() == (sqlinbox.MySQL{}).Name()
				for _, tc := range txControlCases {
					if !tc.queued && writeBehind || tc.mysqlOnly && !mysql {
						continue
					}
					t.Run(tc.name, func(t *testing.T) { testTxControl(t, b, tc, writeBehind) })
				}
			})
		})
	}
}

func testTxControl(t *testing.T, b *backend, tc txControlCase, writeBehind bool) {
	consumer := "txcontrol_" + strings.ToLower(watermill.NewShortUUID())
	ddl := consumer + "_ddl"
	t.Cleanup(func() { mustExec(t, b.direct, "DROP TABLE IF EXISTS "+ddl) })
	mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: consumer, WriteBehind: writeBehind}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := watermill.NewUUID()
	var sqlTx bool // the handler writes through a *sql.Tx, whose statements reach the database without the store
	_, err = mw(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		_, sqlTx = inbox.TxFromContext[*sql.Tx](ctx)
		tx, ok := b.inTx(ctx)
		if !tc.queued && !ok {
			return nil, errors.New("no inbox transaction in the handler's context")
		}
		for _, st := range tc.statements {
			var text string
			var args []any
			switch {
			case st == "INSERT 2; COMMIT":
				text = "INSERT INTO " + b.business + " (consumer, msg_key) VALUES ('" + consumer + "', 'INSERT 2'); COMMIT"
			case strings.HasPrefix(st, "INSERT "):
				text, args = "INSERT INTO "+b.business+" (consumer, msg_key) VALUES (?, ?)", []any{consumer, st}
			case st == "FAIL":
				text = "INSERT INTO " + b.business + " (consumer, msg_key) VALUES (NULL, NULL)"
			default:
				text = strings.ReplaceAll(st, "%s_ddl", ddl)
			}
			if tc.queued {
				if err := inbox.ExecAtCommit(ctx, b.placeholders(text), args...); err != nil {
					return nil, err
				}
				continue
			}
			// The handler goes on whatever its statements return, and returns nil unless the
			// last fails: the store, not the handler, must see that its transaction ended.
			err := tx.exec(ctx, text, args...)
			if st == "FAIL" {
				return nil, fmt.Errorf("the failing insert: %w", err)
			}
		}
		return nil, nil
	})(message.NewMessage(key, nil))
	if err == nil {
		t.Fatal("acked")
	}
	if !errors.Is(err, inbox.ErrTxEndedByHandler) && !strings.Contains(tc.name, "failing insert") {
		t.Errorf("%v, want an error wrapping ErrTxEndedByHandler", err)
	}
	claims, invoices := b.claims(t, consumer, key), b.rows(t, b.business, "WHERE consumer = ?", consumer)
	sent := !tc.queued && sqlTx
	switch {
	case !sent && (claims != 0 || invoices != 0):
		// The store refused what would end the transaction before sending it.
		t.Errorf("%d claims and %d invoices, want none: %v", claims, invoices, err)
	case sent && claims != 0 && !strings.Contains(tc.name, "COMMIT") && !tc.mysqlOnly:
		t.Errorf("%d claims after the handler's ROLLBACK, want none: %v", claims, err)
	}
	t.Logf("%d claims, %d invoices: %v", claims, invoices, err)
}

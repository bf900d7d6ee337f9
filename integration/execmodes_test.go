package integration

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/inboxtest"
)

// The pgx store sends batches and prepares statements by name: the guarantees must not
// depend on the pool's query execution mode, whichever a team sets. The store cases run in
// every mode, and so does the write-behind path.
func TestPgxEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{
		"cache-describe": pgx.QueryExecModeCacheDescribe,
		"describe-exec":  pgx.QueryExecModeDescribeExec,
		"exec":           pgx.QueryExecModeExec,
		"simple":         pgx.QueryExecModeSimpleProtocol,
	}
	// Every case but the thousand messages (a mode changes no concurrency) and the handler
	// panic (which the middleware handles before the store).
	suiteCases := []string{
		"first delivery commits claim and business row together",
		"sequential duplicate is skipped and not an error",
		"concurrent copies of one message",
		"handler error releases the claim",
		"failed commit is a nack",
		"failed commits and rollbacks end their transactions",
		"two consumers each process a message once",
		"bad keys and missing consumer",
		"database outage then recovery",
		"table names are validated, message data is parameterised",
		"InitializeSchema is idempotent",
		"keys compare byte for byte",
		"a table that cannot guard is refused",
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			newBackend := func(t *testing.T) *backend {
				return pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			}
			harness := func(t *testing.T) *inboxtest.Harness { return newBackend(t).harness() }
			inboxtest.Run(t, harness, &inboxtest.Options{Cases: suiteCases})
			t.Run("write-behind", func(t *testing.T) {
				inboxtest.Run(t, harness, &inboxtest.Options{Cases: suiteCases, Config: inbox.Config{WriteBehind: true}})
			})
			t.Run("write-behind unique error", func(t *testing.T) { testWriteBehindUniqueViolation(t, newBackend(t)) })
		})
	}
}

// A syntax error in a queued statement is reported for what it is: in the simple protocol
// pgx sends a batch as one query string and the server refuses all of it (the error comes
// back as the first statement's), so the store says that the whole batch was refused,
// neither "begin" nor another statement; in the other modes it names the statement. In both
// modes, nothing is committed.
func TestPgxSyntaxErrorInAQueuedStatementIsReportedForTheBatch(t *testing.T) {
	for _, tt := range []struct {
		mode pgx.QueryExecMode
		want string
	}{
		{pgx.QueryExecModeSimpleProtocol, "the server refused the whole batch and ran none of it"},
		{pgx.QueryExecModeExec, "queued statement 2: "},
	} {
		b := pgxBackendWith(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = tt.mode })
		for _, writeBehind := range []bool{false, true} {
			mw, err := inbox.NewMiddleware(b.store, inbox.Config{Consumer: "billing", WriteBehind: writeBehind}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(func(msg *message.Message) ([]*message.Message, error) {
				ctx := msg.Context()
				return nil, errors.Join(
					inbox.ExecAtCommit(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES ($1, $2)", "billing", msg.UUID),
					inbox.ExecAtCommit(ctx, "INSERT INTO "+b.business+" (consumer, msg_key) VALUES ('billing', 'unclosed'"),
					inbox.ExecAtCommit(ctx, "SELECT 1"))
			})
			key := watermill.NewUUID()
			_, err = h(message.NewMessage(key, nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "begin:") {
				t.Errorf("%v, write-behind %v: err = %v, want one saying %q", tt.mode, writeBehind, err, tt.want)
			}
			wantRows(t, "claims", b.claims(t, "billing", key), 0)
			wantRows(t, "invoices", b.invoices(t, "billing", key), 0)
		}
	}
}

package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// probe asks a readiness handler once, as an orchestrator does.
func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func wantProbe(t *testing.T, h http.Handler, when string, code int, mentions string) {
	t.Helper()
	got, body := probe(t, h)
	if got != code || !strings.Contains(body, mentions) {
		t.Errorf("%s: %d %q, want %d mentioning %q", when, got, body, code, mentions)
	}
}

// The readiness handler on real PostgreSQL: 503 with the reason for a missing table, for one
// that cannot guard and while the database is away; 200 for a good table, at once after the
// table is created and after the database is back.
func TestReadinessOnPostgres(t *testing.T) {
	b := pgxBackend(t)
	ctx := context.Background()
	missing := testenv.Name("inbox_missing")
	t.Cleanup(func() { _ = b.direct.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+missing) })
	store, err := b.newStore(sqlinbox.Config{Table: missing})
	if err != nil {
		t.Fatal(err)
	}
	ready := inboxhttp.Ready(store.(*sqlinbox.Store))
	wantProbe(t, ready, "a missing table", http.StatusServiceUnavailable, "does not exist")
	creator, err := b.newStore(sqlinbox.Config{Table: missing})
	if err != nil {
		t.Fatal(err)
	}
	if err := creator.(*sqlinbox.Store).InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	wantProbe(t, ready, "the table created", http.StatusOK, "ready")

	bad, _ := createShape(t, b, refusedShapes[0])
	refused, err := b.newStore(sqlinbox.Config{Table: bad})
	if err != nil {
		t.Fatal(err)
	}
	wantProbe(t, inboxhttp.Ready(refused.(*sqlinbox.Store)), "a table without a primary key", http.StatusServiceUnavailable, "it has no primary key")

	restore := b.outage()
	wantProbe(t, ready, "the database away", http.StatusServiceUnavailable, "not ready")
	restore()
	wantProbe(t, ready, "the database back", http.StatusOK, "ready")
}

// A multi-statement store on a DSN without multiStatements=true is not ready, and says which
// DSN settings it needs.
func TestReadinessRefusesAMultiStatementStoreWithoutTheDriverSetting(t *testing.T) {
	b := mysqlBackend(t)
	store, db, err := sqlinbox.NewMultiStatement(mysqlConnector(t, testenv.MySQLDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	wantProbe(t, inboxhttp.Ready(store), "multiStatements off", http.StatusServiceUnavailable, "multiStatements=true")
	good, goodDB, err := sqlinbox.NewMultiStatement(mysqlConnector(t, mysqlMultiStatementsDSN(t)), sqlinbox.MySQL{}, sqlinbox.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { goodDB.Close() })
	wantProbe(t, inboxhttp.Ready(good), "multiStatements on", http.StatusOK, "ready")
}

package sqlinbox

import (
	"errors"
	"testing"

	inbox "github.com/inboxkit/watermill-inbox"
)

// Each shipped dialect refuses a text with a statement that ends its transaction, wherever in
// the text that statement is, and lets through one whose only mention of it is quoted or
// commented out.
func TestTxGuardRefusesTransactionControl(t *testing.T) {
	dialects := map[string]txGuard{"postgres": Postgres{}, "mysql": MySQL{}, "sqlite": SQLite{}}
	refusedEverywhere := []string{
		"ROLLBACK",
		"rollback work",
		"COMMIT",
		"commit;",
		"  /* why */ COMMIT",
		"-- why\nROLLBACK",
		"BEGIN",
		"START TRANSACTION",
		"INSERT INTO t VALUES (1); ROLLBACK",
		"INSERT INTO t VALUES ('a;b'); COMMIT; INSERT INTO t VALUES (2)",
		"(COMMIT)",
	}
	refused := map[string][]string{
		"postgres": {"END", "ABORT", "PREPARE TRANSACTION 'x'", "SELECT $$;$$; COMMIT", "SELECT 1 /* a /* nested */ ; */; ROLLBACK",
			"SELECT E'it\\'s'; COMMIT"},
		"mysql": {"CREATE TABLE t (a INT)", "DROP TABLE t", "ALTER TABLE t ADD b INT", "TRUNCATE t", "RENAME TABLE a TO b",
			"LOCK TABLES t WRITE", "UNLOCK TABLES", "SET autocommit = 1", "SET @@session.autocommit = 1", "XA START 'x'",
			"GRANT SELECT ON t TO u", "SET PASSWORD = 'x'", "/*!40000 COMMIT */", "INSERT INTO t VALUES ('it\\'s'); COMMIT",
			"# why\nCOMMIT", "OPTIMIZE TABLE t", "FLUSH TABLES"},
		"sqlite": {"END", "END TRANSACTION", "INSERT INTO [a;b] VALUES (1); COMMIT"},
	}
	allowed := []string{
		"INSERT INTO t (a) VALUES ('COMMIT')",
		"INSERT INTO t (a) VALUES ('x; ROLLBACK')",
		"UPDATE t SET commit_id = 1",
		"-- ROLLBACK\nINSERT INTO t VALUES (1)",
		"/* COMMIT */ INSERT INTO t VALUES (1)",
		"ROLLBACK TO SAVEPOINT s",
		"ROLLBACK TO s",
		"SAVEPOINT s",
		"INSERT INTO t VALUES (\"a;commit\")",
		"SELECT 1 -- ; COMMIT",
	}
	allowedIn := map[string][]string{
		"postgres": {"SELECT $tag$ ; COMMIT $tag$", "SELECT 'it''s; COMMIT'", "SELECT $1", "CREATE TABLE t (a int)"},
		"mysql":    {"CREATE TEMPORARY TABLE t (a INT)", "DROP TEMPORARY TABLE t", "SELECT 'it\\'s; COMMIT'", "SET @autocommit_seen = 1", "SELECT `a;commit` FROM t"},
		"sqlite":   {"CREATE TABLE t (a)", "SELECT [a;commit] FROM t"},
	}
	for name, guard := range dialects {
		for _, text := range append(refusedEverywhere, refused[name]...) {
			if err := refuseTxEnd(guard, text); !errors.Is(err, inbox.ErrTxEndedByHandler) {
				t.Errorf("%s: %q: %v, want a refusal wrapping ErrTxEndedByHandler", name, text, err)
			}
		}
		for _, text := range append(allowed, allowedIn[name]...) {
			if err := refuseTxEnd(guard, text); err != nil {
				t.Errorf("%s: %q refused: %v", name, text, err)
			}
		}
	}
}

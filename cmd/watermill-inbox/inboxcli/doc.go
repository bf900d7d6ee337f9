// Package inboxcli is the watermill-inbox command, as a package: Main runs its commands
// (schema, migrate, check, cleanup, stats) on the databases its dialects describe. The
// watermill-inbox program calls it with the dialects it ships (Postgres, MySQL, SQLite); a
// program of one's own adds a database of its own, a sqlinbox.Dialect written outside the
// library, without changing the command:
//
//	// yugabyte speaks PostgreSQL's SQL under a name of its own.
//	type yugabyte struct{ sqlinbox.Postgres }
//
//	func (yugabyte) Name() string { return "yugabyte" }
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		yb := inboxcli.Dialect{
//			Dialect: yugabyte{},
//			Names:   []string{"yugabyte"},
//			Open:    func(dsn string, _ bool) (*sql.DB, error) { return sql.Open("pgx", strings.Replace(dsn, "yugabyte://", "postgres://", 1)) },
//		}
//		code := inboxcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, inboxcli.Postgres(), inboxcli.MySQL(), inboxcli.SQLite(), yb)
//		stop()
//		os.Exit(code)
//	}
//
// Its commands, flags, environment and exit statuses are those of the watermill-inbox
// command (see its documentation, and docs/operating.md), and are kept compatible as the
// Go API is.
package inboxcli

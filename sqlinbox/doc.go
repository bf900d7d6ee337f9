// Package sqlinbox holds the stores the inbox middleware claims messages in: an inbox table
// on PostgreSQL, MySQL/MariaDB or SQLite, whose primary key (consumer, message_id) is the
// only duplicate check. Build one and hand it to inbox.NewMiddleware:
//
//	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})               // PostgreSQL, pgx: handlers get a pgx.Tx
//	store, err := sqlinbox.New(db, sqlinbox.MySQL(), sqlinbox.Config{}) // database/sql: handlers get a *sql.Tx
//	err = store.InitializeSchema(ctx)                                    // CREATE TABLE IF NOT EXISTS inbox ...
//
// Each message's claim, the handler's writes and COMMIT then run in one transaction of the
// store's pool; a claim that finds its key committed is a duplicate, acked without the
// handler.
//
// Two adapters run the SQL: PgxStore for PostgreSQL through pgx v5, and SQLStore for any
// database/sql driver (and MultiStatementStore, a SQLStore on MySQL that sends
// multi-statement requests). A Dialect holds all the SQL of one database, the DDL included:
// Postgres, MySQL (MySQL and MariaDB) and SQLite, each in a file of its own. SchemaSQL
// returns the DDL, and MigrationFiles the same as the files of a migration tool (goose,
// golang-migrate), for teams that run their own migrations; the library keeps no version
// table of its own. Dialect's fields are exported, so
// a dialect can be written outside this package; the conformance suite in package inboxtest
// checks a store built on it.
//
// # Drivers and settings
//
//   - PostgreSQL, pgx: give NewPgx a *pgxpool.Pool. BEGIN and the claim travel in one
//     pipelined batch. Keep the default QueryExecModeCacheStatement.
//   - PostgreSQL, database/sql: sql.Open("pgx", url) with github.com/jackc/pgx/v5/stdlib, and
//     the Postgres dialect.
//   - MySQL/MariaDB: github.com/go-sql-driver/mysql with the MySQL dialect. Add
//     interpolateParams=true to the DSN (one round trip per statement instead of three).
//     The claim reads no affected-row count, so clientFoundRows does not change it.
//     NewMultiStatement, on a connector with multiStatements=true too, makes a store that
//     sends a message as multi-statement requests: write-behind mode in one round trip, the
//     claim-first mode in 3 with one statement written through the *sql.Tx, 2 with it
//     queued (not on a Galera node: ErrMultiStatementRefused).
//   - SQLite: modernc.org/sqlite or github.com/mattn/go-sqlite3 with the SQLite dialect and a busy timeout
//     in the DSN, e.g. "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)",
//     so concurrent writers wait for the lock instead of failing.
//
// # Adding a dialect
//
// A dialect is one Dialect value: dialect_postgres.go, dialect_mysql.go and dialect_sqlite.go
// each hold the function that returns one, with all of that database's SQL, how to
// recognise its duplicate-key error, and the catalog query (TableCheck) by which every store
// refuses a table that cannot guard against duplicates (ErrTableMismatch). A new one is a
// file like them, here or in a module of your own, given to New; run the conformance suite
// (package inboxtest) on a store built with it. The command watermill-inbox needs one more
// entry in its table of openers (a driver and its DSN form).
//
// # Privileges
//
// Claims need INSERT, SELECT and UPDATE on the inbox table: PostgreSQL's ON CONFLICT with a
// conflict target reads the key, a duplicate reads the prior claim, and recording a
// handler's produced messages updates the claim. InitializeSchema needs CREATE.
package sqlinbox

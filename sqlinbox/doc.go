// Package sqlinbox holds the store the inbox middleware claims messages in: an inbox table
// on PostgreSQL, [MySQL]/MariaDB or [SQLite], whose primary key (consumer, message_id) is the
// only duplicate check. Build one and hand it to inbox.NewMiddleware:
//
//	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})                 // PostgreSQL, pgx: handlers get a pgx.Tx
//	store, err := sqlinbox.NewDB(db, sqlinbox.MySQL{}, sqlinbox.Config{}) // database/sql: handlers get a *sql.Tx
//	err = store.InitializeSchema(ctx)                                      // CREATE TABLE IF NOT EXISTS inbox ...
//
// Each message's claim, the handler's writes and COMMIT then run in one transaction of the
// store's pool; a claim that finds its key committed is a duplicate, acked without the
// handler.
//
// A [Store] claims, commits, checks its table and cleans it up the same way whatever it runs
// on; its constructor decides only how the statements travel: [NewPgx] in pipelined pgx
// batches, [NewDB] one database/sql statement at a time, [NewMultiStatement] as [MySQL]
// multi-statement requests. A [Dialect] holds all the SQL of one database, the DDL included:
// [Postgres], [MySQL] (MySQL and MariaDB) and [SQLite], each in a file of its own. [SchemaSQL]
// returns the DDL, and [MigrationFiles] the same as the files of a migration tool (goose,
// golang-migrate), for teams that run their own migrations; the library keeps no version
// table of its own.
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
//     queued (not on a Galera node: [ErrMultiStatementRefused]).
//   - SQLite: modernc.org/sqlite or github.com/mattn/go-sqlite3 with the SQLite dialect and a
//     busy timeout in the DSN, e.g. "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)",
//     so concurrent writers wait for the lock instead of failing.
//
// # Another database
//
// A dialect for another database is a type that embeds the closest shipped [Dialect] and
// overrides what differs, given to [NewDB] (or to [NewPgx] by [Config.Dialect]); see [Dialect],
// whose methods are an extension point outside the package's compatibility promise: the
// interface may gain methods in a minor release, which a dialect that embeds a shipped one
// inherits. The table's column names are fixed. Run the conformance suite (package inboxtest) on a store built with
// it.
//
// # Every recorded message leaves
//
// On a table with the column unpublished (the one InitializeSchema and the migrations make; an
// older table gets it from [UpgradeFiles]), a record that holds messages is marked
// unpublished in its claim's commit and cleared once its messages have left
// ([Store.MarkPublished], which the middleware calls). A [RelayRunner] publishes the records
// still unpublished a while after their commit: those whose publish failed, whose process
// died after COMMIT, or whose message never came back. A duplicate of a record that has left
// publishes nothing again, and retention keeps what has not left. See docs/publishing.md.
//
// # Privileges
//
// Claims need INSERT, SELECT and UPDATE on the inbox table: PostgreSQL's ON CONFLICT with a
// conflict target reads the key, a duplicate reads the prior claim, and recording a
// handler's produced messages updates the claim (and so do the marks and the relay, which
// also locks the rows it takes with SELECT ... FOR UPDATE). InitializeSchema needs CREATE.
package sqlinbox

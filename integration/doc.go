// Package integration holds the tests that need real databases and their drivers: the store
// conformance suite (pgx and database/sql on PostgreSQL, MariaDB/MySQL, SQLite) and the
// router tests. It is a module of its own so that the SQLite and MySQL drivers never enter
// the library's go.mod.
package integration

// Package migrations shows the inbox table in a team's own migrations folder, as
// golang-migrate lays it out, and sqlc generating queries against it.
//
// The folder holds the team's first migration (the schema app) and the inbox's, written by
// the command-line tool (which creates the schema too where it is missing); sqlc reads the folder as its schema, skipping the down files, and
// generates inboxdb from query.sql. After changing one of them, regenerate and record the
// new checksums (sqlc.sum), from this directory:
//
//	go run ../../cmd/watermill-inbox schema -format golang-migrate -dialect postgres -table app.billing_inbox -version 20261201000001 -out migrations -force
//	go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
//	go test -run TestGeneratedCodeIsCurrent -sqlc.record
//
// TestGeneratedCodeIsCurrent then fails whenever the migrations, the queries or the
// generated files change without the others, and TestMigrationIsTheLibrarys whenever the
// library's migration differs from the committed one; with INBOX_TEST_SQLC set to a sqlc
// binary the test also runs sqlc diff.
package migrations

//go:generate go run ../../cmd/watermill-inbox schema -format golang-migrate -dialect postgres -table app.billing_inbox -version 20261201000001 -out migrations -force
//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
//go:generate go test -run TestGeneratedCodeIsCurrent -sqlc.record

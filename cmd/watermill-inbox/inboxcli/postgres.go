package inboxcli

import (
	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// Postgres is PostgreSQL through pgx's database/sql driver: postgres:// and postgresql:// URLs,
// or, with -dialect postgres, a keyword/value DSN ("host=db dbname=app").
func Postgres() Dialect {
	return Dialect{
		Dialect: sqlinbox.Postgres(),
		Names:   []string{"postgres", "postgresql"},
		Open:    func(dsn string, _ bool) (*sql.DB, error) { return sql.Open("pgx", dsn) },
	}
}

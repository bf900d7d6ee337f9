package inboxcli

import (
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql" // the "mysql" driver, and its DSN parser

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// MySQL is MySQL and MariaDB through go-sql-driver/mysql: mysql:// or mariadb:// followed by
// the driver's DSN (mysql://user:pass@tcp(host:3306)/db).
func MySQL() Dialect {
	return Dialect{
		shipped: true,
		Dialect: sqlinbox.MySQL{},
		Names:   []string{"mysql", "mariadb"},
		Open: func(dsn string, _ bool) (*sql.DB, error) {
			dsn, err := mysqlDSN(dsn)
			if err != nil {
				return nil, err
			}
			return sql.Open("mysql", dsn)
		},
	}
}

// mysqlDSN turns mysql://DSN or mariadb://DSN into a go-sql-driver/mysql DSN.
func mysqlDSN(dsn string) (string, error) {
	dsn = strings.TrimPrefix(dsn, "mysql://")
	dsn = strings.TrimPrefix(dsn, "mariadb://")
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", usageError{fmt.Errorf("bad MySQL DSN (want mysql://user:password@tcp(host:3306)/database): %w", err)}
	}
	return dsn, nil
}

package handlertest

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultRetriable is Case.Retriable's default: it reports the errors with which the
// shipped databases resolve a race between copies of one message, which a redelivery
// fixes. PostgreSQL: SQLSTATE 40001 (serialization failure), 40P01 (deadlock), 55P03 (lock
// timeout). MySQL and MariaDB: errors 1213 (deadlock) and 1205 (lock wait timeout).
// SQLite: SQLITE_BUSY and SQLITE_LOCKED. It reads an error code where the driver exposes
// one (pgx's *pgconn.PgError, an error with a Code() int such as modernc.org/sqlite's) and
// the driver's text otherwise (go-sql-driver/mysql's "Error 1213 (40001): ...").
func DefaultRetriable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03":
			return true
		}
		return false
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff { // the primary code of an extended one
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	text := err.Error()
	for _, s := range []string{"Error 1213 ", "Error 1205 ", "SQLITE_BUSY", "SQLITE_LOCKED", "database is locked"} {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

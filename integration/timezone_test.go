package integration

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/internal/testenv"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// On MySQL/MariaDB a session's time zone (the DSN's time_zone, else the server's) changes what
// NOW() and a DATETIME default read. Claims and cleanup agree on one clock whatever the
// sessions' zones: a claim is as old as the database's clock says, in every session.

// mysqlSession returns the test's MySQL DSN with a session time zone and, if at is not zero,
// a session clock stopped at that instant (SET timestamp, which NOW(), UTC_TIMESTAMP() and the
// column defaults read), so that a test can claim and clean up at chosen instants.
func mysqlSession(t *testing.T, zone string, at time.Time) string {
	t.Helper()
	params := "time_zone=" + url.QueryEscape("'"+zone+"'")
	if !at.IsZero() {
		params += "&timestamp=" + strconv.FormatFloat(float64(at.UnixMicro())/1e6, 'f', 6, 64)
	}
	return withMySQLParams(testenv.MySQLDSN(t), params)
}

// withMySQLParams adds params to a go-sql-driver/mysql DSN.
func withMySQLParams(dsn, params string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + params
	}
	return dsn + "?" + params
}

// zonedStore opens a store on table in sessions of dsn, closed when t ends.
func zonedStore(t *testing.T, dsn, table string) *sqlinbox.Store {
	t.Helper()
	db := openSQL(t, "mysql", dsn)
	store, err := sqlinbox.NewDB(db, sqlinbox.MySQL{}, sqlinbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// claimAll claims and commits each key for consumer "billing" through store.
func claimAll(t *testing.T, store *sqlinbox.Store, keys ...string) {
	t.Helper()
	for _, key := range keys {
		tx, prior, err := store.Claim(context.Background(), inbox.Claim{Consumer: "billing", Key: key})
		if err != nil || prior != nil {
			t.Fatalf("claim %s: prior %v, %v; want a new claim", key, prior, err)
		}
		if err := tx.Commit(context.Background(), nil); err != nil {
			t.Fatalf("commit %s: %v", key, err)
		}
	}
}

// keysLeft returns the keys of table, in order, read in a session of the server's zone.
func keysLeft(t *testing.T, table string) []string {
	t.Helper()
	db := openSQL(t, "mysql", testenv.MySQLDSN(t))
	rows, err := db.QueryContext(context.Background(), "SELECT message_id FROM "+table+" ORDER BY message_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

func newZonedTable(t *testing.T) string {
	t.Helper()
	table := testenv.Name("tz_inbox")
	db := openSQL(t, "mysql", testenv.MySQLDSN(t))
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.WithoutCancel(context.Background()), "DROP TABLE IF EXISTS "+table)
	})
	store := zonedStore(t, testenv.MySQLDSN(t), table)
	if err := store.InitializeSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return table
}

// Claims made in sessions of one time zone, at instants 2 h, 61 min, 59 min and 0 s before the
// cleanup, meet a cleanup of 1 h in a session of another zone 10 hours apart: it counts and
// deletes exactly the two older ones, and the others are still duplicates.
func TestMySQLRetentionIgnoresSessionTimeZones(t *testing.T) {
	for _, zones := range [][2]string{{"+05:00", "-05:00"}, {"-05:00", "+05:00"}} {
		t.Run(fmt.Sprintf("claims in %s, cleanup in %s", zones[0], zones[1]), func(t *testing.T) {
			t.Parallel()
			table := newZonedTable(t)
			now := time.Now().Truncate(time.Millisecond)
			for key, age := range map[string]time.Duration{
				"a-2h": 2 * time.Hour, "b-61m": 61 * time.Minute, "c-59m": 59 * time.Minute, "d-0s": 0,
			} {
				claimAll(t, zonedStore(t, mysqlSession(t, zones[0], now.Add(-age)), table), key)
			}
			// A claim made in the session of the cleanup's zone counts the same.
			claimAll(t, zonedStore(t, mysqlSession(t, zones[1], now.Add(-90*time.Minute)), table), "e-90m")

			cleaner := zonedStore(t, mysqlSession(t, zones[1], now), table)
			if n, err := cleaner.CountExpired(context.Background(), time.Hour); err != nil || n != 3 {
				t.Errorf("CountExpired(1h) = %d, %v; want 3 (a-2h, b-61m, e-90m)", n, err)
			}
			deleted, err := cleaner.Cleanup(context.Background(), time.Hour, sqlinbox.CleanupConfig{})
			if err != nil || deleted != 3 {
				t.Errorf("Cleanup(1h) deleted %d, %v; want 3", deleted, err)
			}
			if got, want := keysLeft(t, table), []string{"c-59m", "d-0s"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("left after the cleanup: %v, want %v", got, want)
			}
			// The fresh claims still guard: a copy is a duplicate.
			for _, key := range []string{"c-59m", "d-0s"} {
				tx, prior, err := cleaner.Claim(context.Background(), inbox.Claim{Consumer: "billing", Key: key})
				if err != nil || prior == nil {
					if tx != nil {
						_ = tx.Rollback(context.Background())
					}
					t.Errorf("a copy of %s: prior %v, %v; want a duplicate", key, prior, err)
				}
			}
		})
	}
}

// A daylight-saving change between a claim and the cleanup changes nothing: the claim is as
// old as the time that passed. Europe/Berlin's changes of 2026, as its sessions see them:
// on 29 March at 01:00 UTC the clocks go from 02:00 CET (+01:00) to 03:00 CEST (+02:00), on 25
// October at 01:00 UTC from 03:00 CEST back to 02:00 CET. With the server's time zone tables
// loaded (mysql.time_zone_name), both sessions are in 'Europe/Berlin' and the clock crosses
// the change; without them, each session has the offset Berlin had at its instant, which is
// what a named zone gives it.
func TestMySQLRetentionAcrossADaylightSavingChange(t *testing.T) {
	named := mysqlHasZone(t, "Europe/Berlin")
	if named {
		t.Log("the server has its time zone tables: sessions in 'Europe/Berlin'")
	} else {
		t.Log("the server has no time zone tables: sessions in +01:00 and +02:00, Berlin's offsets at those instants")
	}
	zone := func(offset string) string {
		if named {
			return "Europe/Berlin"
		}
		return offset
	}
	for _, tt := range []struct {
		name          string
		claimed       time.Time // instants of the claims
		claimedOffset string
		cleanup       time.Time
		cleanupOffset string
		olderThan     time.Duration
		want          int64 // claims deleted
	}{
		// One second old across the spring change: its wall clock moved 1h1s.
		{"spring forward, 1 s old", time.Date(2026, 3, 29, 0, 59, 59, 500e6, time.UTC), "+01:00",
			time.Date(2026, 3, 29, 1, 0, 0, 500e6, time.UTC), "+02:00", time.Hour, 0},
		// 75 min old across the autumn change: its wall clock moved 15 min.
		{"fall back, 75 min old", time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), "+02:00",
			time.Date(2026, 10, 25, 1, 45, 0, 0, time.UTC), "+01:00", time.Hour, 1},
		// Inside the repeated hour: 02:40 CEST, then 02:20 CET, 40 min later.
		{"fall back, the repeated hour", time.Date(2026, 10, 25, 0, 40, 0, 0, time.UTC), "+02:00",
			time.Date(2026, 10, 25, 1, 20, 0, 0, time.UTC), "+01:00", 30 * time.Minute, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			table := newZonedTable(t)
			claimAll(t, zonedStore(t, mysqlSession(t, zone(tt.claimedOffset), tt.claimed), table), "k")
			cleaner := zonedStore(t, mysqlSession(t, zone(tt.cleanupOffset), tt.cleanup), table)
			if n, err := cleaner.CountExpired(context.Background(), tt.olderThan); err != nil || n != tt.want {
				t.Errorf("CountExpired(%s) = %d, %v; want %d", tt.olderThan, n, err, tt.want)
			}
			if deleted, err := cleaner.Cleanup(context.Background(), tt.olderThan, sqlinbox.CleanupConfig{}); err != nil || deleted != tt.want {
				t.Errorf("Cleanup(%s) deleted %d, %v; want %d", tt.olderThan, deleted, err, tt.want)
			}
		})
	}
}

// mysqlHasZone reports whether the server knows the named time zone.
func mysqlHasZone(t *testing.T, zone string) bool {
	t.Helper()
	db := openSQL(t, "mysql", testenv.MySQLDSN(t))
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM mysql.time_zone_name WHERE Name = ?", zone).Scan(&n); err != nil {
		if err == sql.ErrNoRows {
			return false
		}
		t.Fatal(err)
	}
	return n > 0
}

// oldMySQLTable is the table as releases before processed_at held UTC created it.
const oldMySQLTable = "CREATE TABLE %s (consumer VARBINARY(255) NOT NULL, message_id VARBINARY(255) NOT NULL, " +
	"processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), payload_hash VARBINARY(64), produced LONGBLOB, " +
	"PRIMARY KEY (consumer, message_id), INDEX processed_at (processed_at)) ENGINE=InnoDB"

// processedAt returns the processed_at of each key of table as stored, by key.
func processedAt(t *testing.T, table string) map[string]time.Time {
	t.Helper()
	db := openSQL(t, "mysql", withMySQLParams(testenv.MySQLDSN(t), "parseTime=true"))
	rows, err := db.QueryContext(context.Background(), "SELECT message_id, processed_at FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	at := map[string]time.Time{}
	for rows.Next() {
		var key string
		var when time.Time
		if err := rows.Scan(&key, &when); err != nil {
			t.Fatal(err)
		}
		at[key] = when
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return at
}

// A table an earlier release made, holding claims made in sessions of +05:00, is refused with
// the command that writes its upgrade; each migration tool applies the upgrade in a session of
// that zone: the claims then hold their instants in UTC, the table passes the check, a cleanup
// in a session of -05:00 deletes exactly the claims older than its retention, and running the
// upgrade's statements again changes nothing. Migrating down gives the earlier table back.
func TestMySQLUpgradeToUTCProcessedAt(t *testing.T) {
	for _, tool := range migrationTools {
		t.Run(tool.name, func(t *testing.T) {
			t.Parallel()
			table := testenv.Name("old_inbox")
			admin := openSQL(t, "mysql", testenv.MySQLDSN(t))
			ctx := context.Background()
			if _, err := admin.ExecContext(ctx, fmt.Sprintf(oldMySQLTable, table)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = admin.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table) })
			now := time.Now().UTC().Truncate(time.Microsecond)
			ages := map[string]time.Duration{"a-2h": 2 * time.Hour, "b-30m": 30 * time.Minute, "c-0s": 0}
			for key, age := range ages {
				db := openSQL(t, "mysql", mysqlSession(t, "+05:00", now.Add(-age)))
				if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (consumer, message_id) VALUES ('billing', ?)", key); err != nil {
					t.Fatal(err)
				}
			}

			store := zonedStore(t, mysqlSession(t, "-05:00", time.Time{}), table)
			err := store.CheckTable(ctx)
			want := `brought up to date by the migration of "watermill-inbox schema -upgrade -format goose -dialect mysql -table ` + table + ` -out DIR"`
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("CheckTable of the earlier table = %v, want it to name %s", err, want)
			}

			fsys, err := sqlinbox.UpgradeFiles(sqlinbox.MySQL{}, table, tool.format, "")
			if err != nil {
				t.Fatal(err)
			}
			// golang-migrate runs a file as one request: its MySQL driver needs multiStatements
			// (its command line sets it itself).
			m := tool.open(t, sqlinbox.MySQL{}, "mysql", withMySQLParams(mysqlSession(t, "+05:00", time.Time{}), "multiStatements=true"), fsys)
			if err := m.up(); err != nil {
				t.Fatalf("%s up: %v", tool.name, err)
			}
			at := processedAt(t, table)
			for key, age := range ages {
				if want := now.Add(-age); !at[key].Equal(want) {
					t.Errorf("after the upgrade, %s's processed_at is %s, want %s (UTC)", key, at[key], want)
				}
			}
			if err := zonedStore(t, mysqlSession(t, "-05:00", time.Time{}), table).CheckTable(ctx); err != nil {
				t.Fatalf("CheckTable after the upgrade: %v", err)
			}

			// The upgrade's statements once more, as a tool that ran it again would: nothing moves.
			parsed, err := (sqlinbox.MySQL{}).ParseTable(table)
			if err != nil {
				t.Fatal(err)
			}
			_, up, _ := (sqlinbox.MySQL{}).UpgradeTable(parsed)
			again, err := openSQL(t, "mysql", mysqlSession(t, "+05:00", time.Time{})).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, statement := range up {
				if _, err := again.ExecContext(ctx, statement); err != nil {
					t.Fatalf("%s: %v", statement, err)
				}
			}
			again.Close()
			if after := processedAt(t, table); fmt.Sprint(after) != fmt.Sprint(at) {
				t.Errorf("a second run of the upgrade moved the claims: %v, was %v", after, at)
			}

			cleaner := zonedStore(t, mysqlSession(t, "-05:00", time.Time{}), table)
			if deleted, err := cleaner.Cleanup(ctx, time.Hour, sqlinbox.CleanupConfig{}); err != nil || deleted != 1 {
				t.Errorf("Cleanup(1h) after the upgrade deleted %d, %v; want 1 (a-2h)", deleted, err)
			}
			// A claim made now through a session of +05:00 is as old as one in UTC.
			claimAll(t, zonedStore(t, mysqlSession(t, "+05:00", now), table), "d-new")
			if got := processedAt(t, table)["d-new"]; !got.Equal(now) {
				t.Errorf("a claim after the upgrade holds %s, want %s (UTC)", got, now)
			}

			if err := m.down(); err != nil {
				t.Fatalf("%s down: %v", tool.name, err)
			}
			for key, when := range processedAt(t, table) {
				if want := at[key].Add(5 * time.Hour); key != "d-new" && !when.Equal(want) {
					t.Errorf("after down, %s's processed_at is %s, want %s (+05:00's local time)", key, when, want)
				}
			}
			if err := store.CheckTable(ctx); err == nil || !strings.Contains(err.Error(), "DEFAULT current_timestamp(6)") {
				t.Errorf("CheckTable after down = %v, want the earlier table refused", err)
			}
		})
	}
}

// On a table this release created, the upgrade changes nothing.
func TestMySQLUpgradeOfANewTableChangesNothing(t *testing.T) {
	table := newZonedTable(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	claimAll(t, zonedStore(t, mysqlSession(t, "+05:00", now), table), "k")
	parsed, err := (sqlinbox.MySQL{}).ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	_, up, _ := (sqlinbox.MySQL{}).UpgradeTable(parsed)
	conn, err := openSQL(t, "mysql", mysqlSession(t, "+05:00", time.Time{})).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, statement := range up {
		if _, err := conn.ExecContext(context.Background(), statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
	if got := processedAt(t, table)["k"]; !got.Equal(now) {
		t.Errorf("after the upgrade of a new table, processed_at is %s, want %s", got, now)
	}
	if err := zonedStore(t, testenv.MySQLDSN(t), table).CheckTable(context.Background()); err != nil {
		t.Errorf("CheckTable: %v", err)
	}
}

package inboxcli

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// versions are the versions of the migrations a folder holds, each with the first file of
// that version by name. goose and golang-migrate each refuse a folder in which two
// migrations share a version, and both read a version as a number: 00042 and 42 are one.
type versions map[int64]string

// folderVersions reads the versions of the migration files in dir: a name that starts with
// digits and "_" (20261201150405_create_inbox.sql, 00042_add_column.up.sql, and goose's Go
// migrations).
func folderVersions(dir string) (versions, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("schema: read -out: %w", err)
	}
	taken := versions{}
	for _, e := range entries {
		if v, ok := versionOf(e.Name()); ok && !e.IsDir() {
			if _, seen := taken[v]; !seen {
				taken[v] = e.Name()
			}
		}
	}
	return taken, nil
}

// versionOf reads the version a migration file's name starts with.
func versionOf(name string) (int64, bool) {
	digits, _, ok := strings.Cut(name, "_")
	if !ok || !isDigits(digits) {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	return v, err == nil
}

// next is the version of a migration written at now: the time in UTC, as goose create and
// migrate create number theirs, or, if the folder holds that version or a later one (two
// tables written within one second, or a migration numbered in the future), the one after
// the folder's last.
func (taken versions) next(now time.Time) string {
	v, _ := strconv.ParseInt(now.UTC().Format("20060102150405"), 10, 64)
	if len(taken) > 0 {
		if last := slices.Max(slices.Collect(maps.Keys(taken))); last >= v {
			v = last + 1
		}
	}
	return strconv.FormatInt(v, 10)
}

// refuse fails if one of files has the version of a file in dir that is not one of files
// (of the same name, which refuseExisting lets -force replace): a migration of another
// table, or of another change, has that version, and -force does not change that.
func (taken versions) refuse(dir string, files []file) error {
	for _, f := range files {
		v, ok := versionOf(f.name)
		if !ok {
			continue
		}
		other, taken := taken[v]
		if !taken || slices.ContainsFunc(files, func(g file) bool { return g.name == other }) {
			continue
		}
		return fmt.Errorf("schema: version %d is taken by %s in %s: give another -version, or none to take the next", v, other, dir)
	}
	return nil
}

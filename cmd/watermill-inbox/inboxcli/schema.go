package inboxcli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// The formats -format takes, in the order the usage lists them.
var formats = []sqlinbox.MigrationFormat{sqlinbox.FormatGoose, sqlinbox.FormatGolangMigrate, sqlinbox.FormatSQL}

func (x *cli) schemaCommand(args []string, stdout, stderr io.Writer) error {
	c := x.newCommand("schema")
	format := c.fs.String("format", string(sqlinbox.FormatSQL), "`format` of the migration: goose, golang-migrate or sql (the DDL alone)")
	out := c.fs.String("out", "", "write the migration's files into this existing `folder` (without it: print the one file to stdout)")
	version := c.fs.String("version", "", "the migration's `version`: digits, such as the next number of a sequence (00042); default: the time now in UTC, 20060102150405")
	force := c.fs.Bool("force", false, "replace the files of the table's migration of the same -version")
	upgrade := c.fs.Bool("upgrade", false, "write the migration that brings a table made by an earlier release to this release's shape, instead of the one that creates it")
	if err := c.parse(args, stderr); err != nil {
		return err
	}
	d, _, err := c.resolve(false)
	if err != nil {
		return err
	}
	dialect := d.Dialect
	if !knownFormat(*format) {
		return usagef("schema: unknown -format %q: use goose, golang-migrate or sql", *format)
	}
	files := sqlinbox.MigrationFiles
	if *upgrade {
		parsed, err := dialect.ParseTable(c.table)
		if err != nil {
			return usageError{fmt.Errorf("schema: %w", err)}
		}
		if name, _, _ := dialect.UpgradeTable(parsed); name == "" {
			fmt.Fprintf(stdout, "the %s dialect has no upgrade of the inbox table: no upgrade to write "+
				"(a table without the column unpublished works, without a relay)\n", dialect.Name())
			return nil
		}
		files = sqlinbox.UpgradeFiles
	}
	var taken versions
	if *out != "" {
		if err := checkFolder(*out); err != nil {
			return err
		}
		if taken, err = folderVersions(*out); err != nil {
			return err
		}
		if *version == "" {
			*version = taken.next(time.Now())
		}
	}
	fsys, err := files(dialect, c.table, sqlinbox.MigrationFormat(*format), *version)
	if err != nil {
		return usageError{fmt.Errorf("schema: %w", err)}
	}
	written, err := readFiles(fsys)
	if err != nil {
		return err
	}
	if *out == "" {
		if len(written) != 1 {
			return usagef("schema: -format %s writes %d files: give -out with the migrations folder", *format, len(written))
		}
		_, err := io.WriteString(stdout, written[0].content)
		return err
	}
	if err := taken.refuse(*out, written); err != nil {
		return err
	}
	if err := refuseExisting(*out, written, *force); err != nil {
		return err
	}
	if err := writeAll(*out, written); err != nil {
		return err
	}
	for _, f := range written {
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(*out, f.name))
	}
	return nil
}

func knownFormat(format string) bool {
	for _, f := range formats {
		if string(f) == format {
			return true
		}
	}
	return false
}

// file is one file of the migration, to write.
type file struct{ name, content string }

func readFiles(fsys fs.FS) ([]file, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	files := make([]file, len(entries))
	for i, e := range entries {
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		files[i] = file{e.Name(), string(data)}
	}
	return files, nil
}

// checkFolder accepts an existing directory. A missing one is refused rather than created:
// a typo in the path would otherwise leave the migration where no tool looks for it.
func checkFolder(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("schema: -out %s does not exist: give the migrations folder your tool reads", dir)
	case err != nil:
		return fmt.Errorf("schema: -out: %w", err)
	case !info.IsDir():
		return usagef("schema: -out %s is a file, not a folder", dir)
	}
	return nil
}

// refuseExisting fails if dir holds the migration of this table already: a file of the same
// name, or of the same name under another version (a second create migration of the table,
// whose down would drop it). With force, files of the same name (the same -version) are
// replaced; a migration under another version is still refused.
func refuseExisting(dir string, files []file, force bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("schema: read -out: %w", err)
	}
	var same, other []string
	for _, f := range files {
		_, suffix, _ := strings.Cut(f.name, "_")
		for _, e := range entries {
			existingVersion, existingSuffix, ok := strings.Cut(e.Name(), "_")
			switch {
			case e.Name() == f.name:
				same = append(same, e.Name())
			case ok && existingSuffix == suffix && isDigits(existingVersion):
				other = append(other, e.Name())
			}
		}
	}
	switch {
	case len(other) > 0:
		version, _, _ := strings.Cut(other[0], "_")
		return fmt.Errorf("schema: %s already holds the migration of this table: %s; to write it again, give -version %s -force",
			dir, strings.Join(other, ", "), version)
	case len(same) > 0 && !force:
		return fmt.Errorf("schema: %s already holds %s; give -force to replace it", dir, strings.Join(same, ", "))
	}
	return nil
}

func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// writeAll writes every file under a temporary name in dir, then renames them all, so that a
// failure leaves none of them behind: the temporary files are removed, and so are the files
// renamed before a rename that failed.
func writeAll(dir string, files []file) (err error) {
	temps := make([]string, 0, len(files))
	defer func() {
		for _, temp := range temps {
			_ = os.Remove(temp) // gone once renamed
		}
	}()
	for _, f := range files {
		temp, err := writeTemp(dir, f.content)
		if temp != "" {
			temps = append(temps, temp)
		}
		if err != nil {
			return fmt.Errorf("schema: write into %s: %w", dir, err)
		}
	}
	for i, f := range files {
		if err := os.Rename(temps[i], filepath.Join(dir, f.name)); err != nil {
			for _, done := range files[:i] {
				_ = os.Remove(filepath.Join(dir, done.name))
			}
			return fmt.Errorf("schema: write into %s: %w", dir, err)
		}
	}
	return nil
}

// writeTemp writes content to a new file in dir with the mode of a file a migration tool
// creates, and returns its name, also when it fails after creating it.
func writeTemp(dir, content string) (string, error) {
	f, err := os.CreateTemp(dir, ".watermill-inbox-*.tmp")
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return f.Name(), err
}

package sqlinbox

import (
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"
)

// migrationFS is the [fs.FS] of [MigrationFiles]: a few files at its root, held in memory.
type migrationFS struct{ files []migrationFile }

// migrationFile is one file of a migrationFS.
type migrationFile struct{ name, content string }

var (
	_ fs.ReadDirFS  = migrationFS{}
	_ fs.ReadFileFS = migrationFS{}
)

// newMigrationFS returns the files, sorted by name as [fs.ReadDir] lists them.
func newMigrationFS(files ...migrationFile) migrationFS {
	slices.SortFunc(files, func(a, b migrationFile) int { return strings.Compare(a.name, b.name) })
	return migrationFS{files: files}
}

func (m migrationFS) find(name string) (migrationFile, bool) {
	for _, f := range m.files {
		if f.name == name {
			return f, true
		}
	}
	return migrationFile{}, false
}

// Open opens the root directory "." or one of its files.
func (m migrationFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &migrationDir{entries: m.entries()}, nil
	}
	f, ok := m.find(name)
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &openMigration{info: fileInfo{f}, Reader: strings.NewReader(f.content)}, nil
}

// ReadDir lists the root directory.
func (m migrationFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return m.entries(), nil
}

// ReadFile returns a copy of a file's content.
func (m migrationFS) ReadFile(name string) ([]byte, error) {
	f, ok := m.find(name)
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return []byte(f.content), nil
}

func (m migrationFS) entries() []fs.DirEntry {
	entries := make([]fs.DirEntry, len(m.files))
	for i, f := range m.files {
		entries[i] = fs.FileInfoToDirEntry(fileInfo{f})
	}
	return entries
}

// fileInfo describes a file of a migrationFS: read-only, no time.
type fileInfo struct{ f migrationFile }

func (i fileInfo) Name() string       { return i.f.name }
func (i fileInfo) Size() int64        { return int64(len(i.f.content)) }
func (i fileInfo) Mode() fs.FileMode  { return 0o444 }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }

// openMigration is an open file of a migrationFS.
type openMigration struct {
	info fileInfo
	*strings.Reader
}

func (f *openMigration) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *openMigration) Close() error               { return nil }

// migrationDir is the open root directory of a migrationFS.
type migrationDir struct {
	entries []fs.DirEntry
	read    int
}

func (d *migrationDir) Stat() (fs.FileInfo, error) { return dirInfo{}, nil }
func (d *migrationDir) Close() error               { return nil }
func (d *migrationDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}

// ReadDir returns the next n entries (all that are left if n <= 0), as [fs.ReadDirFile] says.
func (d *migrationDir) ReadDir(n int) ([]fs.DirEntry, error) {
	left := d.entries[d.read:]
	if n <= 0 {
		d.read = len(d.entries)
		return left, nil
	}
	if len(left) == 0 {
		return nil, io.EOF
	}
	left = left[:min(n, len(left))]
	d.read += len(left)
	return left, nil
}

// dirInfo describes the root directory.
type dirInfo struct{}

func (dirInfo) Name() string       { return "." }
func (dirInfo) Size() int64        { return 0 }
func (dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (dirInfo) ModTime() time.Time { return time.Time{} }
func (dirInfo) IsDir() bool        { return true }
func (dirInfo) Sys() any           { return nil }

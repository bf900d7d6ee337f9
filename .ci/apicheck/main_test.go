package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture copies testdata/repo, a repository of the same shape as this one (a library, a
// command-line tool, a contrib module), into a new directory.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/repo")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readAPI(t *testing.T, repo, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "api", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Every kind of identifier, as the lines say it: constants with their type and exact value,
// generics with their constraints, promoted fields and methods, the methods and exported
// fields of an unexported type an exported function returns, a sealed interface; nothing of
// an internal package or an unexported identifier.
func TestTheLinesOfEachKindOfIdentifier(t *testing.T) {
	repo := fixture(t)
	if err := run(repo, true, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"library.txt": `pkg example.com/lib, const Answer untyped int = 42
pkg example.com/lib, const Name string = "lib"
pkg example.com/lib, const Timeout time.Duration = 10000000000
pkg example.com/lib, func Greet(string) string
pkg example.com/lib, func Map[T any, U any]([]T, func(T) U) []U
pkg example.com/lib, func NewCounter() *counter
pkg example.com/lib, func Variadic(string, ...any)
pkg example.com/lib, method (*Exported) Rename(string)
pkg example.com/lib, method (*Set[T]) Add(T)
pkg example.com/lib, method (*Widget) Close() error
pkg example.com/lib, method (*counter) Inc() int
pkg example.com/lib, method (Level) String() string
pkg example.com/lib, method (Widget) Describe() string
pkg example.com/lib, method (Widget) Rename(string)
pkg example.com/lib, type Alias = Widget
pkg example.com/lib, type Exported struct
pkg example.com/lib, type Exported struct, Label string
pkg example.com/lib, type Level int
pkg example.com/lib, type Number interface{~int | ~float64}
pkg example.com/lib, type ReadCloser interface { Close, Read }
pkg example.com/lib, type ReadCloser interface, Close() error
pkg example.com/lib, type ReadCloser interface, Read([]byte) (int, error)
pkg example.com/lib, type Sealed interface { Kind, unexported methods }
pkg example.com/lib, type Sealed interface, Kind() string
pkg example.com/lib, type Set[T comparable] struct
pkg example.com/lib, type Widget struct
pkg example.com/lib, type Widget struct, Done <-chan struct{}
pkg example.com/lib, type Widget struct, Handler func(context.Context, int) (bool, error)
pkg example.com/lib, type Widget struct, ID int
pkg example.com/lib, type Widget struct, Level int
pkg example.com/lib, type Widget struct, embedded *Exported
pkg example.com/lib, type counter struct
pkg example.com/lib, type counter struct, N int
pkg example.com/lib, var Default *Widget
`,
		"cli.txt": `cmd watermill-inbox, command cleanup
cmd watermill-inbox, command stats
cmd watermill-inbox, env FIXTURE_DSN
cmd watermill-inbox, exit 0 exitOK
cmd watermill-inbox, exit 2 exitUsage
cmd watermill-inbox, flag cleanup -batch-size int = 100
cmd watermill-inbox, flag cleanup -dsn string = ""
cmd watermill-inbox, flag cleanup -pause duration = 2s
cmd watermill-inbox, flag stats -dsn string = ""
pkg example.com/lib/cmd/watermill-inbox/cli, func Main([]string) int
pkg example.com/lib/cmd/watermill-inbox/cli, func Usage(string) string
`,
		"contrib-thing.txt": "pkg example.com/lib/contrib/thing, func Thing() bool\n",
	}
	for file, want := range want {
		if got := readAPI(t, repo, file); got != want {
			t.Errorf("api/%s:\n%s\nwant:\n%s", file, got, want)
		}
	}
}

// A changed signature, or a changed flag default, without the API file changing fails the
// check, with the difference and the command that updates the file; after that command it
// passes.
func TestAChangeWithoutItsAPIFileFails(t *testing.T) {
	for _, change := range []struct {
		name           string
		file, old, new string
		apiFile        string
		module         string
		diff           []string
	}{
		{"a function's parameters", "lib.go", "func Greet(name string) string", "func Greet(name string, times int) string", "api/library.txt", "example.com/lib",
			[]string{"-pkg example.com/lib, func Greet(string) string", "+pkg example.com/lib, func Greet(string, int) string"}},
		{"a field's type", "lib.go", "\tID     int\n", "\tID     int64\n", "api/library.txt", "example.com/lib",
			[]string{"-pkg example.com/lib, type Widget struct, ID int", "+pkg example.com/lib, type Widget struct, ID int64"}},
		{"a flag's default", "cmd/watermill-inbox/cli/cli.go", `c.fs.Int("batch-size", 100,`, `c.fs.Int("batch-size", 50,`, "api/cli.txt", "example.com/lib/cmd/watermill-inbox",
			[]string{"-cmd watermill-inbox, flag cleanup -batch-size int = 100", "+cmd watermill-inbox, flag cleanup -batch-size int = 50"}},
		{"the command package's Go API", "cmd/watermill-inbox/cli/cli.go", "func Usage(command string) string", "func Usage(command string, long bool) string", "api/cli.txt", "example.com/lib/cmd/watermill-inbox",
			[]string{"-pkg example.com/lib/cmd/watermill-inbox/cli, func Usage(string) string", "+pkg example.com/lib/cmd/watermill-inbox/cli, func Usage(string, bool) string"}},
	} {
		t.Run(change.name, func(t *testing.T) {
			repo := fixture(t)
			if err := run(repo, true, new(bytes.Buffer)); err != nil {
				t.Fatal(err)
			}
			if err := run(repo, false, new(bytes.Buffer)); err != nil {
				t.Fatalf("the check fails on the files just written: %v", err)
			}
			source := filepath.Join(repo, change.file)
			data, err := os.ReadFile(source)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(change.old)) {
				t.Fatalf("%s has no %q", change.file, change.old)
			}
			if err := os.WriteFile(source, bytes.Replace(data, []byte(change.old), []byte(change.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}

			var out bytes.Buffer
			err = run(repo, false, &out)
			if err == nil || !strings.Contains(err.Error(), updateCommand) || !strings.Contains(err.Error(), change.apiFile) {
				t.Fatalf("check after the change: %v, want an error naming %s and %s\n%s", err, change.apiFile, updateCommand, out.String())
			}
			want := change.apiFile + " is not the API of " + change.module + ":"
			for _, line := range change.diff {
				want += "\n" + line
			}
			if !strings.Contains(out.String(), want) {
				t.Errorf("check printed:\n%s\nwant it to contain:\n%s", out.String(), want)
			}

			if err := run(repo, true, new(bytes.Buffer)); err != nil {
				t.Fatal(err)
			}
			if err := run(repo, false, new(bytes.Buffer)); err != nil {
				t.Errorf("the check fails after -update: %v", err)
			}
		})
	}
}

// A flag defined outside a function that builds a command cannot be placed in the file:
// the check fails rather than leave it out.
func TestAFlagOfNoCommandFails(t *testing.T) {
	repo := fixture(t)
	main := filepath.Join(repo, "cmd", "watermill-inbox", "cli", "cli.go")
	data, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, []byte("\nfunc stray(fs *flag.FlagSet) { fs.Bool(\"verbose\", false, \"\") }\n")...)
	if err := os.WriteFile(main, data, 0o644); err != nil {
		t.Fatal(err)
	}
	err = run(repo, true, new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "flag -verbose bool = false is defined in stray, which builds no command") {
		t.Errorf("run: %v, want the stray flag named", err)
	}
}

// An unexported field that makes a comparable struct incomparable changes no line of the
// API files, so their check passes it; against the release it came from, -since fails it,
// naming the type; an added function is compatible and passes.
func TestAnIncompatibleChangeSinceTheReleaseFails(t *testing.T) {
	release, repo := fixture(t), fixture(t)
	if err := run(repo, true, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) {
		t.Helper()
		source := filepath.Join(repo, "lib.go")
		data, err := os.ReadFile(source)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("lib.go has no %q", old)
		}
		if err := os.WriteFile(source, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("func Greet(name string) string {", "func Hello() string { return \"hello\" }\n\nfunc Greet(name string) string {")
	if err := run(repo, true, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := compatible(release, repo, &out); err != nil {
		t.Fatalf("an added function: %v, want it compatible\n%s", err, out.String())
	}

	edit("type Exported struct{ Label string }", "type Exported struct {\n\tLabel string\n\thook  func()\n}")
	if err := run(repo, false, new(bytes.Buffer)); err != nil {
		t.Fatalf("the API files' check: %v; it cannot see the change, which is why -since exists", err)
	}
	out.Reset()
	err := compatible(release, repo, &out)
	if err == nil || !strings.Contains(err.Error(), "example.com/lib") || !strings.Contains(out.String(), "Exported") ||
		!strings.Contains(out.String(), "comparable") {
		t.Errorf("an unexported func field in a comparable struct: %v\n%s\nwant an incompatible change naming Exported as no longer comparable", err, out.String())
	}
}

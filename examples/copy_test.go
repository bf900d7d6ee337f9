package examples_test

import (
	"encoding/json"
	"go/build"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// library is the module the example programs use; a copy replaces it with this repository,
// since no version of it is published yet.
const library = "github.com/inboxkit/watermill-inbox"

// TestProgramsBuildWhenCopiedOut does what a reader does with an example program: it copies
// the program's non-test .go files into an empty directory outside the repository, next to
// nothing but a go.mod, and builds them there (go mod tidy, go build, with GOWORK=off). A
// program that imports a package of the examples module, or one under internal/, does not
// build.
//
// The go.mod requires the library, replaced by this repository, and every other module the
// examples module requires at the version the workspace selects (go list -m all), which the
// examples' tests run on: the copies build what the tests test, from the packages the test
// run compiled. go mod tidy then drops what the program does not use. A module the cache
// lacks (a test run of this package alone on an empty cache) is downloaded through the
// configured module proxy (go env GOPROXY), as a reader's go mod tidy does; the go.sum holds
// the checksums of every go.sum of the workspace.
func TestProgramsBuildWhenCopiedOut(t *testing.T) {
	programs := examplePrograms(t)
	if len(programs) < 10 {
		t.Fatalf("found %d example programs (%v); the search is broken", len(programs), programs)
	}
	goMod := copyGoMod(t)
	goSum := workspaceSums(t)
	// The copies are built like this test binary, so that they reuse the compiled packages
	// of the test run (-race, above all, compiles every dependency anew).
	var flags []string
	if raceEnabled() {
		flags = append(flags, "-race")
	}
	started := time.Now()
	t.Cleanup(func() {
		t.Logf("%d programs copied out and built in %s", len(programs), time.Since(started).Round(time.Millisecond))
	})
	for _, program := range programs {
		t.Run(filepath.ToSlash(program), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			copyProgram(t, program, dir)
			writeFile(t, filepath.Join(dir, "go.mod"), goMod)
			writeFile(t, filepath.Join(dir, "go.sum"), goSum)
			goCommand(t, dir, "mod", "tidy")
			goCommand(t, dir, append(append([]string{"build"}, flags...), "-o", filepath.Join(dir, "program"), ".")...)
		})
	}
}

// examplePrograms returns every directory under examples/ whose package is main.
func examplePrograms(t *testing.T) []string {
	t.Helper()
	var programs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkg, err := build.ImportDir(path, 0)
		if err == nil && pkg.Name == "main" {
			programs = append(programs, path)
		}
		return nil // a directory without Go files, or with only tests
	})
	if err != nil {
		t.Fatal(err)
	}
	return programs
}

// copyProgram copies the non-test .go files of program into dir.
func copyProgram(t *testing.T, program, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(program, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Base(file)), src)
	}
}

// copyGoMod returns the go.mod of a copy: module example.com/copy, the examples module's go
// line and requirements but those of this repository's other modules, each at the version
// the workspace selects, and the library replaced by the repository root.
func copyGoMod(t *testing.T) []byte {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", "go.mod").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Go      string
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	selected := workspaceVersions(t)
	var b strings.Builder
	b.WriteString("module example.com/copy\n\ngo " + mod.Go + "\n\nrequire (\n")
	for _, r := range mod.Require {
		if strings.HasPrefix(r.Path, library+"/") {
			continue // a contrib module of this repository: no copy may need one
		}
		version := selected[r.Path]
		if r.Path == library {
			version = r.Version // replaced below
		}
		if version == "" {
			t.Fatalf("the workspace selects no version of %s, which examples/go.mod requires", r.Path)
		}
		b.WriteString("\t" + r.Path + " " + version + "\n")
	}
	b.WriteString(")\n\nreplace " + library + " => " + root + "\n")
	return []byte(b.String())
}

// workspaceVersions returns the version of every module of the workspace's build list,
// by path.
func workspaceVersions(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	versions := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, version, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			versions[path] = version
		}
	}
	return versions
}

// workspaceSums returns the lines of go.work.sum and of every go.sum of the workspace's
// modules, each once.
func workspaceSums(t *testing.T) []byte {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "work", "edit", "-json", filepath.Join(root, "go.work")).Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "go.work.sum")}
	for _, use := range work.Use {
		files = append(files, filepath.Join(root, use.DiskPath, "go.sum"))
	}
	var sums strings.Builder
	seen := map[string]bool{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			if !seen[line] {
				seen[line] = true
				sums.WriteString(line)
			}
		}
	}
	return []byte(sums.String())
}

// goCommand runs go in dir, outside any workspace, with the environment's module cache and
// proxy, and fails the test with its output if it fails.
func goCommand(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in a copy: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

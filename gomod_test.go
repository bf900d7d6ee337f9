package inbox_test

import (
	"fmt"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// libraryModule is the library's module path; the contrib modules live under it.
const libraryModule = "github.com/inboxkit/watermill-inbox"

var goLine = regexp.MustCompile(`(?m)^go (1\.\d+(?:\.\d+)?)$`)

// Each contrib module declares the lowest Go its dependencies allow: the highest go line
// among the modules it builds with, the library's included, and not the toolchain's, so
// that go get of a helper does not raise a team's go.mod further than it must. The README
// lists each with that version.
func TestContribModulesDeclareTheGoTheirDependenciesNeed(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	workGo := goLine.FindStringSubmatch(readFile(t, "go.work"))
	mods, err := filepath.Glob("contrib/*/go.mod")
	if err != nil || len(mods) == 0 {
		t.Fatalf("no contrib modules found: %v", err)
	}
	readme := readFile(t, "README.md")
	for _, mod := range mods {
		dir := filepath.Dir(mod)
		t.Run(dir, func(t *testing.T) {
			declared := goLine.FindStringSubmatch(readFile(t, mod))
			if declared == nil || workGo == nil {
				t.Fatalf("no go line in %s or go.work", mod)
			}
			// A workspace of the module and the library alone: its build list is what the
			// module builds with when a team requires it.
			work := filepath.Join(t.TempDir(), "go.work")
			text := fmt.Sprintf("go %s\n\nuse (\n\t%s\n\t%s\n)\n\nreplace %s v0.0.0-00010101000000-000000000000 => %s\n",
				workGo[1], root, filepath.Join(root, dir), libraryModule, root)
			if err := os.WriteFile(work, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.GoVersion}}", "all")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK="+work, "GOFLAGS=")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -m all: %v", err)
			}
			need, by := "1.0", ""
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				path, goVersion, _ := strings.Cut(line, " ")
				if path == libraryModule+"/"+filepath.ToSlash(dir) || goVersion == "" {
					continue // the module itself, or a module without a go line
				}
				if version.Compare("go"+goVersion, "go"+need) > 0 {
					need, by = goVersion, path
				}
			}
			if version.Compare("go"+declared[1], "go"+need) != 0 {
				t.Errorf("%s declares go %s; its dependencies need go %s (%s)", mod, declared[1], need, by)
			}
			path, goVersion := libraryModule+"/"+filepath.ToSlash(dir), strings.TrimSuffix(declared[1], ".0")
			listed := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(path) + "` \\|[^|\n]*\\| " + regexp.QuoteMeta(goVersion) + " \\|$")
			if !listed.MatchString(readme) {
				t.Errorf("README.md's Install section does not list %s with Go %s", path, goVersion)
			}
		})
	}
}

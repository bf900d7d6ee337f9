package inbox_test

import (
	"fmt"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
			// A workspace of the module, the library and the test environment its tests
			// use: its build list is what the module builds with when a team requires it.
			work := filepath.Join(t.TempDir(), "go.work")
			testenvDir := filepath.Join(root, "internal", "testenv")
			text := fmt.Sprintf("go %s\n\nuse (\n\t%s\n\t%s\n\t%s\n)\n\nreplace %s v0.0.0-00010101000000-000000000000 => %s\n\nreplace %s v0.0.0-00010101000000-000000000000 => %s\n",
				workGo[1], root, filepath.Join(root, dir), testenvDir, libraryModule, root, testenvModule, testenvDir)
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

// testenvModule is the test environment of the repository's modules (services, PgBouncer,
// PostgreSQL standbys, Galera), a module of its own so that the library's does not ship it.
const testenvModule = libraryModule + "/internal/testenv"

// The library's packages and tests import nothing of the repository's other modules: each
// would be a requirement of the library's go.mod, in every user's module graph (a test
// environment, or a module that requires the library back). And no module imports another's
// internal packages, except the test environment, which is a module for that: a test that
// leans on the library's internals breaks when the library changes them in a release.
func TestModulesImportNoOtherModulesInternals(t *testing.T) {
	cmd := exec.Command("go", "list", "-f",
		"{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "work")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list work: %v", err)
	}
	moduleOf := map[string]string{}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.SplitN(line, "\t", 3)
		if len(fields) != 3 {
			t.Fatalf("go list printed %q", line)
		}
		moduleOf[fields[0]] = fields[1]
		imports[fields[0]] = strings.Fields(fields[2])
	}
	if moduleOf[testenvModule] != testenvModule {
		t.Fatalf("%s is not a module of the workspace (go list work: %d packages)", testenvModule, len(moduleOf))
	}
	for pkg, mod := range moduleOf {
		for _, imported := range imports[pkg] {
			other, ours := moduleOf[imported]
			if !ours || other == mod {
				continue
			}
			internal := slices.Contains(strings.Split(imported, "/"), "internal")
			switch {
			case mod == libraryModule:
				t.Errorf("%s (the library) imports %s of module %s, which the library's users would then require", pkg, imported, other)
			case internal && other != testenvModule:
				t.Errorf("%s (module %s) imports %s, internal to module %s", pkg, mod, imported, other)
			}
		}
	}
}

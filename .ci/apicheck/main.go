// Command apicheck keeps the committed API files current: api/library.txt (the library's
// packages), api/contrib-NAME.txt (each module under contrib/) and api/cli.txt (the
// command-line tool's commands, flags, environment and exit statuses, and the Go API of
// the package that runs them, inboxcli). Each line is one
// exported identifier with its signature, in the form of Go's own api/*.txt files, sorted.
//
// From the repository root (CI runs the check from .ci/run):
//
//	(cd .ci/apicheck && GOWORK=off go run .)          # fail, with the difference, if a file is not current
//	(cd .ci/apicheck && GOWORK=off go run . -update)  # write the files from the working tree
//	(cd .ci/apicheck && GOWORK=off go run . -since DIR) # and no incompatible change since the release checked out in DIR
//
// The files catch every change of a signature; -since adds golang.org/x/exp/apidiff's
// classification against a release, for what breaks callers without changing a line (a
// struct that stops being comparable when an unexported field is added, say). .ci/run runs
// it against the newest release tag, once there is one.
//
// The packages are loaded in the repository's workspace (its go.work), as they build
// there; this program's own module stays out of it (GOWORK=off).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/tools/go/packages"
)

// updateCommand is how a developer brings the files up to date, printed with a difference.
const updateCommand = "(cd .ci/apicheck && GOWORK=off go run . -update)"

func main() {
	repo := flag.String("repo", "../..", "repository root")
	update := flag.Bool("update", false, "write the API files instead of checking them")
	since := flag.String("since", "", "a checkout of an earlier release: fail on an API change incompatible with it")
	flag.Parse()
	err := run(*repo, *update, os.Stdout)
	if err == nil && *since != "" {
		err = compatible(*since, *repo, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "api check: FAILED:", err)
		os.Exit(1)
	}
}

// apiModule is a published module and the file its API is kept in.
type apiModule struct {
	dir  string // in the repository
	file string // in the repository
	cli  bool   // a command: its commands and flags, and the Go API of its importable packages
}

// apiModules are the published modules with an API: the library, the command-line tool and
// every module under contrib/. The test environment (internal/testenv) is published only for
// the other modules' tests; its path is internal, so it has no API anyone else can use.
func apiModules(repo string) ([]apiModule, error) {
	mods := []apiModule{{dir: ".", file: "api/library.txt"}, {dir: "cmd/watermill-inbox", file: "api/cli.txt", cli: true}}
	contribs, err := filepath.Glob(filepath.Join(repo, "contrib", "*", "go.mod"))
	if err != nil {
		return nil, err
	}
	if len(contribs) == 0 {
		return nil, errors.New("no module under contrib/")
	}
	for _, goMod := range contribs {
		name := filepath.Base(filepath.Dir(goMod))
		mods = append(mods, apiModule{dir: "contrib/" + name, file: "api/contrib-" + name + ".txt"})
	}
	return mods, nil
}

func run(repo string, update bool, stdout io.Writer) error {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	mods, err := apiModules(repo)
	if err != nil {
		return err
	}
	var stale []string
	for _, m := range mods {
		modPath, lines, err := moduleAPI(repo, m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.dir, err)
		}
		text := strings.Join(lines, "\n") + "\n"
		file := filepath.Join(repo, filepath.FromSlash(m.file))
		if update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: written, %d lines\n", m.file, len(lines))
			continue
		}
		committed, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if string(committed) == text {
			fmt.Fprintf(stdout, "%s: current, %d lines\n", m.file, len(lines))
			continue
		}
		fmt.Fprintf(stdout, "%s is not the API of %s:\n", m.file, modPath)
		for _, line := range difference(splitLines(string(committed)), lines) {
			fmt.Fprintln(stdout, line)
		}
		stale = append(stale, m.file)
	}
	if len(stale) > 0 {
		return fmt.Errorf("the API changed and %s did not: if the change is meant, run %s, commit the files with the change and say in CHANGELOG.md what changed",
			strings.Join(stale, ", "), updateCommand)
	}
	return nil
}

// moduleAPI loads the module's packages in the workspace and returns its path and API lines.
func moduleAPI(repo string, m apiModule) (modPath string, lines []string, err error) {
	modPath, published, mains, err := loadModule(repo, m)
	if err != nil {
		return "", nil, err
	}
	if !m.cli {
		return modPath, goAPI(published), nil
	}
	// A command: its commands and flags, from the package that builds them (the main
	// package, or a package it calls), and the Go API of the packages it lets others import.
	if len(mains) != 1 {
		return "", nil, fmt.Errorf("want one main package, found %d", len(mains))
	}
	builder := mains[0]
	for _, p := range published {
		if buildsCommands(p) {
			builder = p
		}
	}
	lines, err = cliAPI(path.Base(mains[0].PkgPath), builder)
	if err != nil {
		return "", nil, err
	}
	lines = append(lines, goAPI(published)...)
	slices.Sort(lines)
	return modPath, lines, nil
}

// loadModule loads the module's packages in the workspace and returns its path, its
// importable packages (sorted by path) and its main packages.
func loadModule(repo string, m apiModule) (modPath string, published, mains []*packages.Package, err error) {
	dir := filepath.Join(repo, filepath.FromSlash(m.dir))
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", nil, nil, err
	}
	modPath = modfile.ModulePath(goMod)
	if modPath == "" {
		return "", nil, nil, errors.New("go.mod has no module line")
	}
	config := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedModule,
		Dir:  dir,
		Env:  append(os.Environ(), "GOWORK="+workspace(repo), "GOFLAGS="),
	}
	pkgs, err := packages.Load(config, "./...")
	if err != nil {
		return "", nil, nil, err
	}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return "", nil, nil, errors.New(strings.Join(errs, "; "))
	}
	for _, p := range pkgs {
		switch {
		case p.Module == nil || p.Module.Path != modPath || slices.Contains(strings.Split(p.PkgPath, "/"), "internal"):
		case p.Name == "main":
			mains = append(mains, p)
		default:
			published = append(published, p)
		}
	}
	slices.SortFunc(published, func(a, b *packages.Package) int { return strings.Compare(a.PkgPath, b.PkgPath) })
	if !m.cli && len(published) == 0 {
		return "", nil, nil, errors.New("no package")
	}
	return modPath, published, mains, nil
}

// workspace is the repository's go.work, or off if it has none.
func workspace(repo string) string {
	work := filepath.Join(repo, "go.work")
	if _, err := os.Stat(work); err != nil {
		return "off"
	}
	return work
}

func splitLines(text string) []string {
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// difference returns the lines only in committed as "-line" and those only in current as
// "+line", in sorted order: both are sorted sets, so this is their whole diff.
func difference(committed, current []string) []string {
	in := func(lines []string) map[string]bool {
		set := map[string]bool{}
		for _, l := range lines {
			set[l] = true
		}
		return set
	}
	was, is := in(committed), in(current)
	var out []string
	for _, l := range committed {
		if !is[l] {
			out = append(out, "-"+l)
		}
	}
	for _, l := range current {
		if !was[l] {
			out = append(out, "+"+l)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Compare(a[1:], b[1:]) })
	if len(out) == 0 { // same lines, other order or spacing
		out = append(out, "(the same lines, not as the program writes them: sorted, one a line, a newline at the end)")
	}
	return out
}

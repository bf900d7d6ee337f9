// Command releasecheck rehearses a release without publishing anything. It builds a file://
// module proxy that serves the library, the test environment, the command-line tool and the
// contrib modules at a version, made from the repository's tracked files exactly as a module proxy would serve the
// tagged commits, then does what a user does, in a fresh module outside the repository with
// the workspace off: `go get` the library and build and run a program that uses it,
// `go install` the CLI at that version and run it, and `go get` every contrib module and
// build and run a program that calls each. It fails if any committed go.mod has a replace directive (go
// install refuses such a module), if the workspace needs a module no proxy serves, or if a
// user's module graph holds the test environment: the library must not require it, and a
// contrib user's build must not download it.
//
// From the repository root (CI runs it from .ci/run):
//
//	(cd .ci/releasecheck && GOWORK=off go run . -version v0.1.0)
//
// The version defaults to the newest entry of CHANGELOG.md. Downloads go to a temporary
// module cache, filled from the local one and then from `go env GOPROXY`; checksums of the
// served modules are not looked up in a checksum database (GOSUMDB=off), since it has never
// seen them.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// The modules a release publishes, by directory: the library, the test environment (which
// the tests of the CLI and of the contrib modules import, so their go.mod files require it;
// its path is internal, so nothing outside the repository can import it), the command-line
// tool, and every module under contribDir (the data layer helpers). The other modules of
// the workspace (examples, integration, bench) are not published.
const (
	libraryDir = "."
	testenvDir = "internal/testenv"
	cliDir     = "cmd/watermill-inbox"
	contribDir = "contrib"
)

func main() {
	repo := flag.String("repo", "../..", "repository root")
	version := flag.String("version", "", "version to rehearse (default: the newest in CHANGELOG.md)")
	keep := flag.Bool("keep", false, "keep the temporary directory and print its path")
	flag.Parse()
	if err := run(*repo, *version, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "release dry run: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("release dry run: OK")
}

func run(repo, version string, keep bool) (err error) {
	start := time.Now()
	repo, err = filepath.Abs(repo)
	if err != nil {
		return err
	}
	if version == "" {
		if version, err = changelogVersion(filepath.Join(repo, "CHANGELOG.md")); err != nil {
			return err
		}
		fmt.Printf("version %s: the newest entry of CHANGELOG.md\n", version)
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version like v0.1.0", version)
	}

	files, err := trackedFiles(repo)
	if err != nil {
		return err
	}
	mods, err := checkGoMods(repo, files)
	if err != nil {
		return err
	}
	library, testenv, cli := mods[libraryDir], mods[testenvDir], mods[cliDir]
	if library == "" || testenv == "" || cli == "" {
		return fmt.Errorf("want modules in %q, %q and %q, found %v", libraryDir, testenvDir, cliDir, mods)
	}

	tmp, err := os.MkdirTemp("", "releasecheck-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("keeping", tmp)
	} else {
		defer removeAll(tmp)
	}
	proxyDir := filepath.Join(tmp, "proxy")
	env, err := userEnv(tmp, proxyDir, library)
	if err != nil {
		return err
	}

	// The workspace (development) must resolve without fetching anything: the nested modules'
	// placeholder requirement of the library is replaced in go.work, never in a go.mod.
	// GOWORK=off (how this program is run) must not reach it.
	if _, err := runGo(repo, append(os.Environ(), "GOWORK=", "GOPROXY=off", "GOFLAGS="), "list", "-m", "all"); err != nil {
		return fmt.Errorf("the workspace needs a module no proxy serves: %w", err)
	}
	fmt.Println("workspace: resolves with GOPROXY=off")

	// 1. The library, as its tag would serve it.
	commitTime, err := gitTime(repo)
	if err != nil {
		return err
	}
	libFiles := filesUnder(repo, files, libraryDir, nil)
	if err := serve(proxyDir, module.Version{Path: library, Version: version}, commitTime, libFiles); err != nil {
		return err
	}

	// 2. The test environment, then the CLI and the contrib modules, after the release step
	// that makes each require the repository's modules it requires at this version: on a copy
	// of its files, `go mod edit -require=module@version` and `go mod tidy`, which must fetch
	// them from the proxy above.
	contribs := contribModules(mods)
	if len(contribs) == 0 {
		return fmt.Errorf("no module under %s/", contribDir)
	}
	published := map[string]bool{library: true}
	for _, dir := range append([]string{testenvDir, cliDir}, slices.Sorted(maps.Keys(contribs))...) {
		if err := release(repo, tmp, proxyDir, env, files, dir, mods[dir], library, published, version, commitTime); err != nil {
			return err
		}
		published[mods[dir]] = true
	}

	// 3. A user's program: a fresh module that fetches the library and builds against it.
	user := filepath.Join(tmp, "user")
	if err := os.MkdirAll(user, 0o755); err != nil {
		return err
	}
	if _, err := runGo(user, env, "mod", "init", "example.com/inboxuser"); err != nil {
		return err
	}
	if _, err := runGo(user, env, "get", library+"@"+version); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(userProgram), 0o644); err != nil {
		return err
	}
	if _, err := runGo(user, env, "mod", "tidy"); err != nil {
		return err
	}
	userBin := filepath.Join(tmp, "bin", "inboxuser")
	if _, err := runGo(user, env, "build", "-o", userBin, "."); err != nil {
		return err
	}
	out, err := runCmd(user, env, userBin)
	if err != nil {
		return err
	}
	if !strings.Contains(out, "CREATE TABLE IF NOT EXISTS") || !strings.Contains(out, `"billing"."inbox"`) {
		return fmt.Errorf("the user's program printed %q, want the DDL of billing.inbox", out)
	}
	if err := wantRequire(filepath.Join(user, "go.mod"), library, version); err != nil {
		return err
	}
	// The library requires none of the repository's other modules: its users' module graph
	// holds no test environment.
	graph, err := runGo(user, env, "list", "-m", "all")
	if err != nil {
		return err
	}
	if ours := repositoryModules(graph, library); len(ours) > 0 {
		return fmt.Errorf("the library's users have %v in their module graph", ours)
	}
	fmt.Printf("the user's module graph: %d modules, none of the repository's but the library\n", strings.Count(graph, "\n"))

	// 4. The CLI, installed by module path and version, then run.
	gobin := filepath.Join(tmp, "bin")
	if _, err := runGo(user, append(env, "GOBIN="+gobin), "install", cli+"@"+version); err != nil {
		return err
	}
	bin := filepath.Join(gobin, path.Base(cli))
	info, err := runCmd(user, env, "go", "version", "-m", bin)
	if err != nil {
		return err
	}
	for _, want := range []string{"\tmod\t" + cli + "\t" + version, "\tdep\t" + library + "\t" + version} {
		if !strings.Contains(info, want) {
			return fmt.Errorf("go version -m %s does not show %q", bin, strings.TrimSpace(want))
		}
	}
	db := "sqlite://" + filepath.Join(tmp, "inbox.db")
	if _, err := runCmd(user, env, bin, "schema", "-dialect", "postgres"); err != nil {
		return err
	}
	if _, err := runCmd(user, env, bin, "migrate", "-dsn", db); err != nil {
		return err
	}
	if out, err = runCmd(user, env, bin, "stats", "-dsn", db); err != nil {
		return err
	}
	if !regexp.MustCompile(`(?m)^claims\s+0$`).MatchString(out) {
		return fmt.Errorf("stats on a new table printed %q, want 0 claims", out)
	}
	// 5. A user's program that fetches every contrib module at this version and builds.
	if err := buildContribUser(tmp, env, library, contribs, version); err != nil {
		return err
	}
	fmt.Printf("done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// release serves the module in dir at version, as its tag would serve it once its go.mod
// requires the repository's modules (the library's path and those under it) that it requires,
// at placeholders in the working tree, at that version. Each must be published, and served
// before it.
func release(repo, tmp, proxyDir string, env, files []string, dir, modPath, library string, published map[string]bool, version string, commitTime time.Time) error {
	work := filepath.Join(tmp, "release", filepath.FromSlash(dir))
	if err := copyFiles(repo, filesUnder(repo, files, dir, nil), dir, work); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(work, "go.mod"))
	if err != nil {
		return err
	}
	mf, err := modfile.Parse(dir+"/go.mod", data, nil)
	if err != nil {
		return err
	}
	edit := []string{"mod", "edit"}
	for _, r := range mf.Require {
		if r.Mod.Path != library && !strings.HasPrefix(r.Mod.Path, library+"/") {
			continue
		}
		if !published[r.Mod.Path] {
			return fmt.Errorf("%s/go.mod requires %s, which is not published (or not before it)", dir, r.Mod.Path)
		}
		edit = append(edit, "-require="+r.Mod.Path+"@"+version)
	}
	if _, err := runGo(work, env, edit...); err != nil {
		return err
	}
	if _, err := runGo(work, env, "mod", "tidy"); err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(work, "go.mod"))
	if err != nil {
		return err
	}
	goSum, err := os.ReadFile(filepath.Join(work, "go.sum"))
	if err != nil {
		return err
	}
	released := filesUnder(repo, files, dir, map[string][]byte{"go.mod": goMod, "go.sum": goSum})
	return serve(proxyDir, module.Version{Path: modPath, Version: version}, commitTime, released)
}

// repositoryModules returns the modules of `go list -m all` output under the library's path,
// other than the library and the main module.
func repositoryModules(graph, library string) []string {
	var ours []string
	for i, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		if path, _, _ := strings.Cut(line, " "); i > 0 && strings.HasPrefix(path, library+"/") {
			ours = append(ours, line)
		}
	}
	return ours
}

// contribModules returns the module paths under contribDir, by directory.
func contribModules(mods map[string]string) map[string]string {
	contribs := map[string]string{}
	for dir, modPath := range mods {
		if strings.HasPrefix(dir, contribDir+"/") {
			contribs[dir] = modPath
		}
	}
	return contribs
}

// buildContribUser makes a fresh module that gets every contrib module at version and runs
// a program calling each one's function outside any message: each must report no inbox
// transaction (ok == false) rather than panic.
func buildContribUser(tmp string, env []string, library string, contribs map[string]string, version string) error {
	user := filepath.Join(tmp, "contribuser")
	if err := os.MkdirAll(user, 0o755); err != nil {
		return err
	}
	if _, err := runGo(user, env, "mod", "init", "example.com/contribuser"); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, modPath := range contribs {
		want[modPath] = true
		if _, err := runGo(user, env, "get", modPath+"@"+version); err != nil {
			return err
		}
	}
	for _, modPath := range slices.Sorted(maps.Keys(contribProgramImports)) {
		if !want[modPath] {
			return fmt.Errorf("the contrib user's program imports %s, which is not under %s/", modPath, contribDir)
		}
		delete(want, modPath)
	}
	if len(want) > 0 {
		return fmt.Errorf("the contrib user's program does not use %v: add it to contribProgram", slices.Sorted(maps.Keys(want)))
	}
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(contribProgram), 0o644); err != nil {
		return err
	}
	if _, err := runGo(user, env, "mod", "tidy"); err != nil {
		return err
	}
	bin := filepath.Join(tmp, "bin", "contribuser")
	if _, err := runGo(user, env, "build", "-o", bin, "."); err != nil {
		return err
	}
	out, err := runCmd(user, env, bin)
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "inboxent false\ninboxgorm false" {
		return fmt.Errorf("the contrib user's program printed %q, want every helper false outside a message", out)
	}
	for _, modPath := range contribs {
		if err := wantRequire(filepath.Join(user, "go.mod"), modPath, version); err != nil {
			return err
		}
	}
	// The contrib modules' tests import the test environment, so it is in a contrib user's
	// module graph (and go mod tidy downloads it), though no build of theirs uses it.
	graph, err := runGo(user, env, "list", "-m", "all")
	if err != nil {
		return err
	}
	fmt.Printf("the contrib user's module graph: the repository's %s\n", strings.Join(repositoryModules(graph, library), ", "))
	return nil
}

// contribProgramImports are the contrib modules contribProgram uses.
var contribProgramImports = map[string]bool{
	"github.com/inboxkit/watermill-inbox/contrib/inboxent":  true,
	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm": true,
}

// contribProgram calls every helper with a context of no message.
const contribProgram = `package main

import (
	"context"
	"fmt"

	"entgo.io/ent/dialect"
	"gorm.io/gorm"

	"github.com/inboxkit/watermill-inbox/contrib/inboxent"
	"github.com/inboxkit/watermill-inbox/contrib/inboxgorm"
)

func main() {
	ctx := context.Background()
	_, ok := inboxent.Driver(ctx, dialect.Postgres)
	fmt.Println("inboxent", ok)
	_, ok = inboxgorm.DB(ctx, &gorm.DB{})
	fmt.Println("inboxgorm", ok)
}
`

// userProgram is what a user writes: a pgx store, the middleware, and the DDL for a
// migration. pgxpool connects lazily, so nothing here needs a server.
const userProgram = `package main

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{Table: "billing.inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil); err != nil {
		log.Fatal(err)
	}
	ddl, err := sqlinbox.SchemaSQL(sqlinbox.Postgres{}, "billing.inbox")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ddl)
}
`

var changelogHeading = regexp.MustCompile(`^## \[?(v\d+\.\d+\.\d+[^\]\s]*)`)

// changelogVersion returns the version of the first "## vX.Y.Z" heading.
func changelogVersion(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := changelogHeading.FindStringSubmatch(s.Text()); m != nil {
			return m[1], nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no \"## vX.Y.Z\" heading", file)
}

// trackedFiles lists the files git tracks (as slash paths), read from the working tree.
func trackedFiles(repo string) ([]string, error) {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(repo, filepath.FromSlash(f))); errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		files = append(files, f)
	}
	return files, nil
}

// checkGoMods reads every tracked go.mod, fails on a replace directive, and returns the module
// path by directory.
func checkGoMods(repo string, files []string) (map[string]string, error) {
	mods := map[string]string{}
	var problems []string
	for _, f := range files {
		if path.Base(f) != "go.mod" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s has no module line", f)
		}
		for _, r := range mf.Replace {
			problems = append(problems, fmt.Sprintf("%s: replace %s => %s (go install refuses a module with replace directives; put it in go.work)",
				f, r.Old.Path, r.New.Path))
		}
		mods[path.Dir(f)] = mf.Module.Mod.Path
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	fmt.Printf("go.mod files: %d, none with a replace directive\n", len(mods))
	return mods, nil
}

// repoFile is a tracked file as the zip package wants it, optionally with other content.
type repoFile struct {
	rel  string // path inside the module
	abs  string
	data []byte // if non-nil, the content instead of the file's
}

func (f repoFile) Path() string { return f.rel }

func (f repoFile) Lstat() (os.FileInfo, error) {
	info, err := os.Lstat(f.abs)
	if err != nil || f.data == nil {
		return info, err
	}
	return sizedInfo{info, int64(len(f.data))}, nil
}

func (f repoFile) Open() (io.ReadCloser, error) {
	if f.data != nil {
		return io.NopCloser(bytes.NewReader(f.data)), nil
	}
	return os.Open(f.abs)
}

type sizedInfo struct {
	fs.FileInfo
	size int64
}

func (i sizedInfo) Size() int64 { return i.size }

// filesUnder returns the tracked files in dir, with the contents in override (by path inside
// the module) instead of the working tree's. Files of nested modules stay in the list: the
// zip package leaves them out, as the go command does.
func filesUnder(repo string, files []string, dir string, override map[string][]byte) []modzip.File {
	var out []modzip.File
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	for _, f := range files {
		rel, ok := strings.CutPrefix(f, prefix)
		if !ok {
			continue
		}
		out = append(out, repoFile{rel: rel, abs: filepath.Join(repo, filepath.FromSlash(f)), data: override[rel]})
	}
	return out
}

func copyFiles(repo string, files []modzip.File, dir, dst string) error {
	for _, f := range files {
		r, err := f.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(f.Path()))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// serve writes m's .info, .mod and .zip into the file:// proxy at dir, and checks the zip.
func serve(dir string, m module.Version, t time.Time, files []modzip.File) error {
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(m.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVersion)
	checked, err := modzip.CheckFiles(files)
	if err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	var goMod []byte
	for _, f := range files {
		if f.Path() == "go.mod" {
			r, err := f.Open()
			if err != nil {
				return err
			}
			goMod, err = io.ReadAll(r)
			r.Close()
			if err != nil {
				return err
			}
		}
	}
	if goMod == nil {
		return fmt.Errorf("%s: no go.mod", m)
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.Version, t.UTC()})
	zf, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := modzip.Create(zf, m, files); err != nil {
		zf.Close()
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	if _, err := modzip.CheckZip(m, base+".zip"); err != nil {
		return err
	}
	for name, data := range map[string][]byte{base + ".info": info, base + ".mod": goMod, filepath.Join(vdir, "list"): []byte(m.Version + "\n")} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	zinfo, err := os.Stat(base + ".zip")
	if err != nil {
		return err
	}
	fmt.Printf("proxy: %s: %d files (%d left out: nested modules, other modules' files), zip %d KiB\n",
		m, len(checked.Valid), len(checked.Omitted), (zinfo.Size()+1023)/1024)
	return nil
}

// userEnv is a user's environment outside the repository: no workspace, a fresh module
// cache, and the proxy at proxyDir in front of the local module cache and the usual proxy.
func userEnv(tmp, proxyDir, library string) ([]string, error) {
	usual, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOPROXY: %w", err)
	}
	cache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	proxies := []string{fileURL(proxyDir)}
	if c := strings.TrimSpace(string(cache)); c != "" {
		proxies = append(proxies, fileURL(filepath.Join(c, "cache", "download")))
	}
	proxies = append(proxies, strings.TrimSpace(string(usual)))
	overrides := map[string]string{
		"GOWORK":  "off",
		"GOFLAGS": "-mod=mod -trimpath", // -trimpath: build cache hits whatever GOMODCACHE is
		"GOPROXY": strings.Join(proxies, ","),
		// No checksum database has seen these versions. GOPRIVATE stays unset: with it (even
		// with GONOPROXY=none) go install of the CLI at its version never asked the proxy
		// for the CLI's module and failed with "does not contain package".
		"GOSUMDB":     "off",
		"GONOSUMDB":   library,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOMODCACHE":  filepath.Join(tmp, "modcache"),
		"GOTOOLCHAIN": "local",
		"GOPATH":      filepath.Join(tmp, "gopath"),
		"GOBIN":       "",
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !isOverridden(k, overrides) {
			env = append(env, kv)
		}
	}
	for k, v := range overrides {
		env = append(env, k+"="+v)
	}
	fmt.Println("user environment (outside the repository):")
	for _, k := range slices.Sorted(maps.Keys(overrides)) {
		fmt.Printf("  %s=%s\n", k, overrides[k])
	}
	return env, nil
}

func isOverridden(k string, overrides map[string]string) bool {
	_, ok := overrides[k]
	return ok
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

func gitTime(repo string) (time.Time, error) {
	out, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%cI").Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %w", err)
	}
	return time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
}

func wantRequire(goMod, path, version string) error {
	data, err := os.ReadFile(goMod)
	if err != nil {
		return err
	}
	mf, err := modfile.Parse(goMod, data, nil)
	if err != nil {
		return err
	}
	for _, r := range mf.Require {
		if r.Mod.Path == path && r.Mod.Version == version {
			return nil
		}
	}
	return fmt.Errorf("the user's go.mod does not require %s %s", path, version)
}

// runGo runs the go command, echoing the command line, and its output only if it fails.
func runGo(dir string, env []string, args ...string) (string, error) {
	return execute(dir, env, false, "go", args...)
}

// runCmd runs a command, echoing the command line and its output.
func runCmd(dir string, env []string, name string, args ...string) (string, error) {
	return execute(dir, env, true, name, args...)
}

func execute(dir string, env []string, echo bool, name string, args ...string) (string, error) {
	display := path.Base(name)
	fmt.Printf("$ %s %s\n", display, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	began := time.Now()
	out, err := cmd.CombinedOutput()
	if d := time.Since(began); d > 5*time.Second {
		fmt.Printf("    (%s)\n", d.Round(100*time.Millisecond))
	}
	if len(out) > 0 && (echo || err != nil) {
		for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			fmt.Println("    " + line)
		}
	}
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", display, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// removeAll deletes dir, including the module cache's read-only files.
func removeAll(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

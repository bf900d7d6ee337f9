// Command vulncheck runs govulncheck over every module of the workspace against a snapshot
// of the Go vulnerability database that the module proxy serves as a module
// (golang.org/x/vulndb at vulndbVersion), so that it needs no other network than the one the
// build has. It fails when code of the workspace reaches a vulnerable symbol of a module it
// requires; vulnerabilities of the standard library are the toolchain's, fixed by a newer
// Go, and are printed as a note. Without the snapshot (no module proxy) it says so and
// passes.
//
// From the repository root (CI runs it from .ci/run):
//
//	(cd .ci/vulncheck && GOWORK=off go run .)
//
// Move vulndbVersion to a newer snapshot (the proxy's pseudo-versions of golang.org/x/vulndb)
// to check against newer reports.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// vulndbVersion is the snapshot of the vulnerability database checked against.
const vulndbVersion = "v0.0.0-20261105234957-e22db6528018"

func main() {
	repo := flag.String("repo", "../..", "repository root")
	version := flag.String("vulndb", vulndbVersion, "version of golang.org/x/vulndb to check against")
	flag.Parse()
	if err := run(*repo, *version, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "govulncheck: FAILED:", err)
		os.Exit(1)
	}
}

func run(repo, version string, out io.Writer) error {
	repo, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	osvDir, err := downloadSnapshot(version)
	if err != nil {
		fmt.Fprintf(out, "govulncheck: SKIPPED, nothing checked: the vulnerability database golang.org/x/vulndb@%s could not be had "+
			"from the module proxy (%v)\n", version, err)
		return nil
	}
	tmp, err := os.MkdirTemp("", "vulncheck")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	db := filepath.Join(tmp, "db")
	entries, err := writeIndex(osvDir, db)
	if err != nil {
		return fmt.Errorf("index the database: %w", err)
	}
	bin := filepath.Join(tmp, "govulncheck")
	build := exec.Command("go", "build", "-o", bin, "golang.org/x/vuln/cmd/govulncheck")
	build.Env, build.Stderr = append(os.Environ(), "GOWORK=off"), os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build govulncheck: %w", err)
	}
	// The workspace's packages load as they build there: with its go.work.
	scan := exec.Command(bin, "-C", repo, "-db", "file://"+db, "-format", "json", "work")
	scan.Env = append(os.Environ(), "GOWORK="+filepath.Join(repo, "go.work"), "GOFLAGS=")
	var stdout bytes.Buffer
	scan.Stdout, scan.Stderr = &stdout, os.Stderr
	if err := scan.Run(); err != nil {
		return fmt.Errorf("govulncheck: %w", err)
	}
	findings, roots, err := readFindings(&stdout)
	if err != nil {
		return err
	}
	return report(out, findings, roots, entries, version)
}

// downloadSnapshot returns the folder of the snapshot's OSV entries (data/osv), downloading
// the module into the module cache if it is not there.
func downloadSnapshot(version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "golang.org/x/vulndb@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	output, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(output, &info); jsonErr == nil && info.Error != "" {
		return "", errors.New(info.Error)
	}
	if err != nil {
		return "", err
	}
	dir := filepath.Join(info.Dir, "data", "osv")
	if _, err := os.Stat(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// osvEntry is what the index needs of an OSV entry.
type osvEntry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

// writeIndex lays out the snapshot's entries as govulncheck's database format (v1): ID/ (the
// entries as they are), index/db.json and index/modules.json. A module's entries carry no
// "fixed" version: the index is then a superset, and govulncheck checks each entry's ranges
// itself.
func writeIndex(osvDir, db string) (int, error) {
	if err := os.MkdirAll(filepath.Join(db, "index"), 0o755); err != nil {
		return 0, err
	}
	if err := os.Symlink(osvDir, filepath.Join(db, "ID")); err != nil {
		return 0, err
	}
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return 0, err
	}
	type vuln struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
	}
	modules := map[string][]vuln{}
	var latest time.Time
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return 0, err
		}
		var e osvEntry
		if err := json.Unmarshal(data, &e); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
		if e.Modified.After(latest) {
			latest = e.Modified
		}
		var seen []string
		for _, a := range e.Affected {
			if name := a.Package.Name; name != "" && !slices.Contains(seen, name) {
				seen = append(seen, name)
				modules[name] = append(modules[name], vuln{e.ID, e.Modified})
			}
		}
	}
	type module struct {
		Path  string `json:"path"`
		Vulns []vuln `json:"vulns"`
	}
	var index []module
	for path, vulns := range modules {
		index = append(index, module{path, vulns})
	}
	sort.Slice(index, func(i, j int) bool { return index[i].Path < index[j].Path })
	for name, v := range map[string]any{"db.json": map[string]time.Time{"modified": latest}, "modules.json": index} {
		data, err := json.Marshal(v)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(db, "index", name), data, 0o644); err != nil {
			return 0, err
		}
	}
	return len(files), nil
}

// finding is what govulncheck's JSON says of one vulnerability: trace[0] is the vulnerable
// symbol (function set: the code reaches it), package or module.
type finding struct {
	OSV          string `json:"osv"`
	FixedVersion string `json:"fixed_version"`
	Trace        []struct {
		Module, Version, Package, Function, Receiver string
	} `json:"trace"`
}

func readFindings(r io.Reader) (findings []finding, roots int, err error) {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Finding *finding `json:"finding"`
			SBOM    *struct {
				Roots []string `json:"roots"`
			} `json:"SBOM"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return findings, roots, nil
		} else if err != nil {
			return nil, 0, fmt.Errorf("read govulncheck's output: %w", err)
		}
		if msg.Finding != nil && len(msg.Finding.Trace) > 0 {
			findings = append(findings, *msg.Finding)
		}
		if msg.SBOM != nil {
			roots = len(msg.SBOM.Roots)
		}
	}
}

// report prints what was found and fails for a vulnerable symbol of a required module that
// the workspace's code reaches.
func report(out io.Writer, findings []finding, roots, entries int, version string) error {
	reached, stdlib, unreached := map[string]string{}, map[string]string{}, map[string]string{}
	for _, f := range findings {
		t := f.Trace[0]
		line := fmt.Sprintf("%s in %s@%s (fixed in %s)", f.OSV, t.Module, t.Version, orNone(f.FixedVersion))
		switch {
		case t.Function == "":
			unreached[f.OSV+t.Module] = line
		case t.Module == "stdlib" || t.Module == "toolchain":
			stdlib[f.OSV] = line
		default:
			reached[f.OSV+t.Module] = line + ", reached: " + t.Package + "." + strings.TrimPrefix(t.Receiver+".", ".") + t.Function
		}
	}
	for key := range reached {
		delete(unreached, key)
	}
	for id := range stdlib {
		delete(unreached, id+"stdlib")
		delete(unreached, id+"toolchain")
	}
	fmt.Fprintf(out, "govulncheck: %d packages of the workspace against %d entries of golang.org/x/vulndb@%s\n", roots, entries, version)
	printAll(out, "required, not reached by the code", unreached)
	printAll(out, "the standard library's, reached (the toolchain's: a newer Go fixes them)", stdlib)
	printAll(out, "REACHED in a required module", reached)
	if len(reached) > 0 {
		return fmt.Errorf("%d vulnerabilities of required modules are reached: require their fixed versions", len(reached))
	}
	fmt.Fprintln(out, "govulncheck: no vulnerability of a required module is reached")
	return nil
}

func printAll(out io.Writer, title string, lines map[string]string) {
	if len(lines) == 0 {
		return
	}
	sorted := make([]string, 0, len(lines))
	for _, l := range lines {
		sorted = append(sorted, l)
	}
	slices.Sort(sorted)
	fmt.Fprintf(out, "govulncheck: %d %s:\n", len(sorted), title)
	for _, l := range sorted {
		fmt.Fprintln(out, "  "+l)
	}
}

func orNone(v string) string {
	if v == "" {
		return "none yet"
	}
	return v
}

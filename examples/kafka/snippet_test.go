package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// kfakePins are the modules whose versions the README's kfake snippet pins with go mod
// edit -require, each at the version this module requires.
var kfakePins = []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/twmb/franz-go", "github.com/twmb/franz-go/pkg/kmsg"}

// TestKfakeSnippet builds the README's kfake server as a reader does: its Go block as
// main.go in a new directory outside the repository, then the sh block's commands as
// written, through the configured module proxy, except that the program is built and not
// run (it serves on the fixed port 9092 until interrupted). The pins must be the versions
// this module requires, so that the snippet builds what the tests run.
func TestKfakeSnippet(t *testing.T) {
	readme := readFile(t, "README.md")
	program, commands := snippetBlock(t, readme, "```go\n"), strings.Split(snippetBlock(t, readme, "```sh\n"), "\n")
	checkPins(t, commands, readFile(t, "../go.mod"))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, command := range commands {
		args := strings.Fields(command)
		switch {
		case len(args) == 0:
			continue
		case strings.Join(args, " ") == "go run .":
			args = []string{"go", "build", "-o", filepath.Join(dir, "kfake"), "."}
		case args[0] != "go":
			t.Fatalf("the README's kfake block runs %q; the test runs go commands only", command)
		}
		if raceEnabled() && args[1] == "build" {
			args = append(args[:2], append([]string{"-race"}, args[2:]...)...) // reuses the test run's compiled packages
		}
		goCommand(t, dir, args[1:]...)
		ran++
	}
	if ran != 4 {
		t.Fatalf("ran %d commands of the README's kfake block; want go mod init, go mod edit, go mod tidy, go run", ran)
	}
}

// snippetBlock returns the first block of the README's kfake section that opens with fence.
func snippetBlock(t *testing.T, readme, fence string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Several processes on kfake")
	if !ok {
		t.Fatal("README.md has no section on several processes on kfake")
	}
	_, block, ok := strings.Cut(section, "\n"+fence)
	if !ok {
		t.Fatalf("README.md's kfake section has no %q block", strings.TrimSpace(fence))
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// checkPins fails unless the go mod edit of commands requires each of kfakePins at the
// version goMod requires.
func checkPins(t *testing.T, commands []string, goMod string) {
	t.Helper()
	var edit string
	for _, command := range commands {
		if strings.HasPrefix(command, "go mod edit ") {
			edit = command
		}
	}
	for _, module := range kfakePins {
		required := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(module) + ` (\S+)`).FindStringSubmatch(goMod)
		if required == nil {
			t.Fatalf("go.mod requires no %s", module)
		}
		if pin := "-require " + module + "@" + required[1]; !strings.Contains(edit+" ", pin+" ") {
			t.Errorf("the README's go mod edit (%q) does not pin %s@%s, the version go.mod requires", edit, module, required[1])
		}
	}
}

// goCommand runs the go command in dir, outside any workspace.
func goCommand(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// raceEnabled reports whether the test binary was built with -race.
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

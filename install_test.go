package inbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cloneDir is where the README's local-clone recipe expects the clone, relative to the
// module that uses it.
const cloneDir = "../watermill-inbox"

// localService is the program the test builds against the clone: it imports inbox and
// sqlinbox, and builds a middleware on a pgx store (the pool connects on first use only).
const localService = `package main

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("inbox middleware built")
}
`

// TestInstallFromALocalClone does what the README's Install section tells a reader with a
// local clone: in a new module outside the repository, with the clone (this repository) at
// cloneDir, it runs the recipe's commands as written and builds and runs a program that
// imports inbox and sqlinbox. The go commands use the configured module proxy, which has
// no copy of the library: a recipe that asks it for one fails here as it does for the
// reader.
func TestInstallFromALocalClone(t *testing.T) {
	recipe := localCloneRecipe(t)
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	service := filepath.Join(parent, "service")
	if err := os.Mkdir(service, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(service, filepath.FromSlash(cloneDir))); err != nil {
		t.Fatal(err)
	}
	goIn(t, service, "mod", "init", "example.com/service")
	if err := os.WriteFile(filepath.Join(service, "main.go"), []byte(localService), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, command := range recipe {
		args := strings.Fields(command)
		if args[0] != "go" {
			t.Fatalf("README.md's local-clone recipe runs %q; the test runs go commands only", command)
		}
		goIn(t, service, args[1:]...)
	}
	binary := filepath.Join(parent, "service-binary")
	goIn(t, service, "build", "-o", binary, ".")
	if out, err := exec.Command(binary).CombinedOutput(); err != nil || !strings.Contains(string(out), "inbox middleware built") {
		t.Fatalf("the program built against the clone: %v\n%s", err, out)
	}
	// The build used the clone, not a copy from elsewhere.
	dir := strings.TrimSpace(goIn(t, service, "list", "-m", "-f", "{{.Dir}}", libraryModule))
	if got, want := evalSymlinks(t, dir), evalSymlinks(t, root); got != want {
		t.Errorf("the library came from %s, not the clone %s", got, want)
	}
}

// localCloneRecipe returns the commands of the sh block of README.md's Install section that
// replaces the library with cloneDir.
func localCloneRecipe(t *testing.T) []string {
	t.Helper()
	readme := readFile(t, "README.md")
	_, install, ok := strings.Cut(readme, "\n## Install\n")
	if !ok {
		t.Fatal("README.md has no Install section")
	}
	install, _, _ = strings.Cut(install, "\n## ")
	for _, block := range strings.Split(install, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if commands := commandsIn("```sh\n" + block + "```"); strings.Contains(block, "-replace "+libraryModule+"="+cloneDir) {
			return commands
		}
	}
	t.Fatalf("README.md's Install section has no sh block that replaces %s with %s", libraryModule, cloneDir)
	return nil
}

// goIn runs the go command in dir, outside any workspace, and returns its standard output.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func evalSymlinks(t *testing.T, path string) string {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return resolved
}

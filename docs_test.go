package inbox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// documentedCommands says what runs each command the documentation shows, so that none can
// drift from the code: a command must match a pattern here, and what the pattern names must
// exist (a line of .ci/run, a test, a step of the release dry run).
var documentedCommands = []struct {
	pattern string
	// ci: .ci/run contains this text; test: a test of this name exists; release: the release
	// dry run (.ci/releasecheck) contains this text.
	ci, test, release string
}{
	// The README's first two commands, which .ci/run takes from it.
	{pattern: `^go run \./examples/quickstart$`, ci: `grep -m1 '^go run ' README.md`},
	{pattern: `^go test -race -count=1 -timeout 30m work$`, ci: `grep -m1 '^go test ' README.md`},
	// Every other test command runs a subset of go test work.
	{pattern: `^go test (-race )?\./(examples|bench)(/\S*)?$`, ci: `grep -m1 '^go test ' README.md`},
	{pattern: `^go test -run '\^\$' -bench \. -benchtime \d+x \./sqlinbox/$`, ci: `-benchtime 1x`},
	// The benchmark program's commands are parsed by its test; a tiny run of its main
	// scenario is part of go test work.
	{pattern: `^go run \./bench( \S+)*$`, test: "TestDocumentedCommandsParse"},
	{pattern: `^go get github\.com/inboxkit/watermill-inbox(@\S+)?$`, release: `"get", library+"@"+version`},
	{pattern: `^go install github\.com/inboxkit/watermill-inbox/cmd/watermill-inbox@\S+$`, release: `"install", cli+"@"+version`},
	{pattern: `^go install \./cmd/watermill-inbox$`, ci: `GOBIN="$(mktemp -d)" go install ./cmd/watermill-inbox`},
	// The Install section's recipe for a local clone, run as written outside the repository.
	{pattern: `^go mod edit -require github\.com/inboxkit/watermill-inbox@v0\.0\.0-00010101000000-000000000000 -replace github\.com/inboxkit/watermill-inbox=\.\./watermill-inbox$`, test: "TestInstallFromALocalClone"},
	{pattern: `^go mod tidy$`, test: "TestInstallFromALocalClone"}, // and TestKfakeSnippet
	// The Kafka example's kfake server for several processes, built as written outside the
	// repository (go run . serves on a fixed port until interrupted: the test builds it).
	{pattern: `^go mod init kfake$`, test: "TestKfakeSnippet"},
	{pattern: `^go mod edit -require github\.com/twmb/franz-go/pkg/kfake@\S+ -require github\.com/twmb/franz-go@\S+ -require github\.com/twmb/franz-go/pkg/kmsg@\S+$`, test: "TestKfakeSnippet"},
	{pattern: `^go run \.$`, test: "TestKfakeSnippet"},
	// Run as written, in order, against SQLite.
	{pattern: `^go run \./cmd/watermill-inbox (schema|migrate|check|cleanup|stats)( |$)`, test: "TestDocumentedCommands"},
	// goose's and golang-migrate's commands front their libraries, which the test runs
	// in-process on the files the CLI writes.
	{pattern: `^goose -dir migrations (postgres|mysql|sqlite3) "\$DATABASE_URL" up$`, test: "TestMigrationToolsCreateTheTable"},
	{pattern: `^migrate -path migrations -database "\$DATABASE_URL" up$`, test: "TestMigrationToolsCreateTheTable"},
	// The programs whose brokers CI has, run with few orders.
	{pattern: `^go run \./examples/(gochannel|amqp|nats|redisstream|sql|outbox|cqrs|http)$`, ci: `for example in gochannel amqp nats redisstream sql outbox cqrs http; do`},
	// The HTTP example's server, in its README's curl session: its test serves the endpoint.
	{pattern: `^go run \./examples/http -listen :8080$`, test: "TestOrderByHTTPThenByBroker"},
	// Kafka needs a broker CI does not have: a test runs the program on kfake.
	{pattern: `^go run \./examples/kafka$`, test: "TestKafkaProgram"},
	{pattern: `^go run \./examples/anybroker -broker \w+$`, test: "TestAnyBroker"},
	// No Docker engine in CI: the file is validated with compose-go (as "docker compose
	// config" does), its ports and checks tested.
	{pattern: `^docker compose up -d( --wait)?( kafka)?$`, ci: composeCheck, test: "TestComposePublishesDefaults"},
	{pattern: `^docker-compose up -d$`, ci: composeCheck},
	{pattern: `^while docker-compose ps \| grep -q 'health: starting'; do sleep 2; done$`, ci: composeCheck},
	{pattern: `^docker(-| )compose config$`, ci: composeCheck},
	{pattern: `^\.ci/run( --release)?$`, ci: `[ "${1:-}" = "--release" ] && release=true`},
	// The API files: CI checks them; the program's test runs -update on a copy.
	{pattern: `^\(cd \.ci/apicheck && GOWORK=off go run \.\)$`, ci: `(cd .ci/apicheck && GOWORK=off go run .)`},
	{pattern: `^\(cd \.ci/apicheck && GOWORK=off go run \. -update\)$`, test: "TestAChangeWithoutItsAPIFileFails"},
}

// inlineCommand is a command in a code span: `go run ./examples/amqp`.
// composeCheck is the line of .ci/run that validates docker-compose.yml.
const composeCheck = `(cd .ci/composecheck && GOWORK=off go run . ../../docker-compose.yml)`

var inlineCommand = regexp.MustCompile("`((?:go (?:run|test|get|install)|docker|docker-compose) [^`]+|\\.ci/run)`")

// TestDocumentedCommandsAreRun finds every command in the sh blocks and code spans of
// README.md, docs/ and the examples' READMEs, and fails for one nothing runs.
func TestDocumentedCommandsAreRun(t *testing.T) {
	ciRun := readFile(t, ".ci/run")
	releaseCheck := readFile(t, ".ci/releasecheck/main.go")
	tests := testNames(t)
	var docs []string
	for _, root := range []string{"README.md", "docs", "examples"} {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
				docs = append(docs, path)
			}
			return nil
		})
	}
	used := make([]bool, len(documentedCommands))
	commands := 0
	for _, doc := range docs {
		for _, command := range commandsIn(readFile(t, doc)) {
			commands++
			i := matchCommand(command)
			if i < 0 {
				t.Errorf("%s: nothing runs %q: run it in .ci/run or a test, and add it to documentedCommands", doc, command)
				continue
			}
			used[i] = true
			t.Logf("%s: %s (%s)", doc, command, documentedCommands[i].pattern)
		}
	}
	for i, c := range documentedCommands {
		if c.ci != "" && !strings.Contains(ciRun, c.ci) {
			t.Errorf("%s: .ci/run does not contain %q", c.pattern, c.ci)
		}
		if c.release != "" && !strings.Contains(releaseCheck, c.release) {
			t.Errorf("%s: the release dry run does not contain %q", c.pattern, c.release)
		}
		if c.test != "" && !tests[c.test] {
			t.Errorf("%s: no test %s", c.pattern, c.test)
		}
		if !used[i] {
			t.Logf("%s: no documented command matches (any more)", c.pattern)
		}
	}
	if commands < 20 {
		t.Errorf("found %d documented commands in %d files; the extraction is broken", commands, len(docs))
	}
}

// The README's Go versions are the go lines of go.work and of the library's go.mod.
func TestDocumentedGoVersions(t *testing.T) {
	readme := strings.Join(strings.Fields(readFile(t, "README.md")), " ")
	for file, re := range map[string]string{"go.work": `(?m)^go (1\.\d+)`, "go.mod": `(?m)^go (1\.\d+)`} {
		m := regexp.MustCompile(re).FindStringSubmatch(readFile(t, file))
		if m == nil {
			t.Fatalf("%s has no go line", file)
		}
		want := map[string]string{"go.work": "Go " + m[1] + " or later for the workspace", "go.mod": "the library itself needs Go " + m[1]}[file]
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not say %q, which %s's go line (%s) means", want, file, m[0])
		}
	}
	if work := readFile(t, "go.work"); regexp.MustCompile(`(?m)^go 1\.\d+\.[1-9]`).MatchString(work) {
		t.Errorf("go.work asks for a patch release of Go; the README promises any 1.x.0:\n%s", work)
	}
}

func matchCommand(command string) int {
	for i, c := range documentedCommands {
		if regexp.MustCompile(c.pattern).MatchString(command) {
			return i
		}
	}
	return -1
}

// commandsIn returns the commands of markdown: the lines of ```sh blocks without their
// comments, and code spans that start with a command.
func commandsIn(markdown string) []string {
	var commands []string
	inSh := false
	for _, line := range strings.Split(markdown, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		case inSh:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				commands = append(commands, line)
			}
			continue
		}
		for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
			commands = append(commands, m[1])
		}
	}
	return commands
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// testNames returns the names of the Test functions in every module of the repository.
func testNames(t *testing.T) map[string]bool {
	names := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			for _, m := range decl.FindAllStringSubmatch(readFile(t, path), -1) {
				names[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

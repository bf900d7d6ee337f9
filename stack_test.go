package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// recommendedStack is the router's middleware list the documentation recommends, outermost
// first, and recommendedRetry the Retry it uses. docs/middleware-order.md says why.
var (
	recommendedStack = []string{"poisonQueue", "retry.Middleware", "middleware.Recoverer",
		"inboxMiddleware", "middleware.Timeout(10*time.Second)", "middleware.CorrelationID"}
	recommendedRetry = "middleware.Retry{MaxRetries:math.MaxInt32,InitialInterval:50*time.Millisecond," +
		"Multiplier:1.5,MaxInterval:2*time.Second,ShouldRetry:inbox.ShouldRetry(3,logger),Logger:logger}"
)

// stackShownIn are the files that must show the stack: the README's program, its page,
// the package documentation, NewMiddleware's, the Example and every example program, each
// in its main.go (a copy of one builds on its own, so each carries its stack).
var stackShownIn = []string{
	"README.md", "docs/middleware-order.md", "doc.go", "middleware.go", "example_test.go",
	"examples/quickstart/main.go", "examples/http/main.go", "examples/gochannel/main.go", "examples/amqp/main.go",
	"examples/nats/main.go", "examples/redisstream/main.go", "examples/sql/main.go",
	"examples/kafka/main.go", "examples/anybroker/main.go",
	"examples/outbox/main.go", "examples/cqrs/main.go",
}

// TestRecommendedStackIsShownTheSameEverywhere finds every AddMiddleware call that adds the
// inbox, in code and in documentation (doc comments, README.md, docs/*.md, the programs
// under examples/ but the e2e scenario, which tests broker redelivery with the inbox alone),
// and fails for one that is not the recommended stack, for a Retry other than the
// recommended one, for a poison queue without the inbox.Poisonous filter, for an
// inbox.Config that names no consumer, for a file of stackShownIn that shows no stack and for
// a program of it that does not call CheckTable.
func TestRecommendedStackIsShownTheSameEverywhere(t *testing.T) {
	files := []string{"README.md", "doc.go", "middleware.go", "example_test.go"}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, pages...)
	err = filepath.WalkDir("examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == filepath.Join("examples", "internal", "e2e") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(recommendedStack, ", ")
	shown := map[string]int{}
	for _, file := range files {
		text := uncomment(readFile(t, file))
		for _, call := range callsIn(text, "AddMiddleware(") {
			args, err := callArgs(call)
			if err != nil {
				t.Errorf("%s: cannot parse %q: %v", file, call, err)
				continue
			}
			if !strings.Contains(strings.ToLower(strings.Join(args, ",")), "inbox") {
				continue // not the inbox's stack, e.g. a program's delivery counter
			}
			if got := strings.Join(args, ", "); got != want {
				t.Errorf("%s: AddMiddleware(%s), want the recommended stack AddMiddleware(%s)", file, got, want)
				continue
			}
			shown[file]++
		}
		// Config.Consumer has no default: a shown configuration without one does not run.
		for _, literal := range callsIn(strings.ReplaceAll(text, "sqlinbox.Config{", "sqlinbox.StoreConfig{"), "inbox.Config{") {
			if !strings.Contains(literal, "Consumer") {
				t.Errorf("%s: %s names no consumer (Consumer or ConsumerByHandler)", file, strings.Join(strings.Fields(literal), " "))
			}
		}
		// The poison queue takes the message's own failures only, never the database's.
		for _, call := range callsIn(text, "middleware.PoisonQueue(") {
			t.Errorf("%s: %s takes every failure, the database's too; want middleware.PoisonQueueWithFilter(..., inbox.Poisonous)", file, call)
		}
		for _, call := range callsIn(text, "middleware.PoisonQueueWithFilter(") {
			if args, err := callArgs(call); err != nil || len(args) != 3 || args[2] != "inbox.Poisonous" {
				t.Errorf("%s: %s, want inbox.Poisonous as its filter", file, call)
			}
		}
		for _, literal := range callsIn(text, "middleware.Retry{") {
			if got := strings.ReplaceAll(strings.Join(strings.Fields(literal), ""), ",}", "}"); got != recommendedRetry {
				t.Errorf("%s: %s, want the recommended %s", file, literal, recommendedRetry)
			}
		}
	}
	for _, file := range stackShownIn {
		if shown[file] == 0 {
			t.Errorf("%s shows no recommended stack", file)
		}
		// A program refuses to start on a table or a driver that cannot work.
		if strings.HasSuffix(file, "main.go") || file == "README.md" || file == "example_test.go" {
			if !strings.Contains(readFile(t, file), ".CheckTable(ctx)") {
				t.Errorf("%s: no store.CheckTable(ctx) before the router runs", file)
			}
		}
	}
	t.Logf("the recommended stack, shown in %d files: %v", len(shown), shown)
}

// uncomment turns the lines of Go comments into text (doc comments show code indented after
// "//"), so that code in documentation is found like code in code.
var commentLine = regexp.MustCompile(`(?m)^\s*//\s?`)

func uncomment(text string) string { return commentLine.ReplaceAllString(text, "") }

// callsIn returns each occurrence of open (ending in "(" or "{") up to its matching closing
// bracket, skipping // comments.
func callsIn(text, open string) []string {
	var calls []string
	closing := map[byte]byte{'(': ')', '{': '}'}[open[len(open)-1]]
	for i := strings.Index(text, open); i >= 0; {
		depth, j := 0, i+len(open)-1
		var b strings.Builder
		b.WriteString(text[i:j])
		for ; j < len(text); j++ {
			c := text[j]
			if c == '/' && j+1 < len(text) && text[j+1] == '/' {
				for j < len(text) && text[j] != '\n' {
					j++
				}
				continue
			}
			b.WriteByte(c)
			switch c {
			case open[len(open)-1]:
				depth++
			case closing:
				depth--
			}
			if depth == 0 {
				break
			}
		}
		calls = append(calls, b.String())
		next := strings.Index(text[j:], open)
		if next < 0 {
			break
		}
		i = j + next
	}
	return calls
}

// callArgs returns the arguments of a call as Go source without spaces.
func callArgs(call string) ([]string, error) {
	expr, err := parser.ParseExpr("f" + call[strings.Index(call, "("):])
	if err != nil {
		return nil, err
	}
	var args []string
	for _, arg := range expr.(*ast.CallExpr).Args {
		var b strings.Builder
		if err := printer.Fprint(&b, token.NewFileSet(), arg); err != nil {
			return nil, err
		}
		args = append(args, strings.Join(strings.Fields(b.String()), ""))
	}
	return args, nil
}

package inbox_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A Go block of README.md or docs/*.md is either a complete program (it starts with
// "package") or a fragment marked, on the line before its opening fence, with
//
//	<!-- snippet: WRAPPER -->
//
// where WRAPPER is one of snippetWrappers: "decl" for top-level declarations, "body" for
// statements of a function that returns an error and has the variables of snippetBody in
// scope. Imports the fragment does not use are dropped, and variables it declares are
// used, so a fragment need not show either. Or it is an excerpt, marked with
//
//	<!-- snippet: from PATH -->
//
// where PATH, relative to the repository root, is a Go file that a package of the
// repository compiles (its tests included): the block's non-blank lines, trimmed of white
// space, must be a contiguous run of the file's non-blank trimmed lines, where a line
// "// ..." in the block stands for any number of lines left out. The file is built by its
// own module's tests; the excerpt is compared, not built again. CONTRIBUTING.md says the
// same to writers.
var snippetWrappers = map[string]string{"decl": snippetDecl, "body": snippetBody}

// snippetModule is the module the blocks build in: it requires every package they import.
const snippetModule = "examples"

const snippetImports = `import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/inboxhttp"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)
`

const snippetDecl = "package snippet\n\n" + snippetImports + "\n//SNIPPET\n"

const snippetBody = "package snippet\n\n" + snippetImports + `
// InvoiceIssued is an event type for the cqrs fragments.
type InvoiceIssued struct{ OrderID string }

func snippet(
	ctx context.Context,
	logger watermill.LoggerAdapter,
	pool *pgxpool.Pool,
	db *sql.DB,
	store *sqlinbox.Store,
	router *message.Router,
	publisher, amqpPublisher message.Publisher,
	subscriber message.Subscriber,
	poisonQueue, inboxMiddleware message.HandlerMiddleware,
	marshaler cqrs.JSONMarshaler,
	pub *inbox.Publisher,
) error {
	{
//SNIPPET
//USED
	}
	return nil
}
`

// snippetFrom is the marker of an excerpt: <!-- snippet: from PATH -->.
const snippetFrom = "from"

// excerptGap is the line that stands, in an excerpt, for lines of the file left out.
const excerptGap = "// ..."

// goBlock is one Go block of a page: its first line in the page, its wrapper ("" for a
// complete program), the file it is cut from (for the wrapper "from") and its text.
type goBlock struct {
	page    string
	line    int
	wrapper string
	from    string
	text    string
}

var snippetMarker = regexp.MustCompile(`^<!-- snippet: (\w+)(?: (\S+))? -->$`)

func goBlocks(t *testing.T, page string) []goBlock {
	var blocks []goBlock
	lines := strings.Split(readFile(t, page), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := goBlock{page: page, line: i + 2}
		if i > 0 {
			if m := snippetMarker.FindStringSubmatch(lines[i-1]); m != nil {
				b.wrapper, b.from = m[1], m[2]
			}
		}
		var text []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			text = append(text, lines[i])
		}
		b.text = strings.Join(text, "\n") + "\n"
		blocks = append(blocks, b)
	}
	return blocks
}

// source returns the file to build for b, and the line of the file where b's text starts.
func (b goBlock) source() (string, int, error) {
	if b.wrapper == "" {
		if !strings.HasPrefix(b.text, "package ") {
			return "", 0, fmt.Errorf("neither a complete program (package ...) nor marked <!-- snippet: decl|body --> or <!-- snippet: from PATH --> on the line before")
		}
		return b.text, 1, nil
	}
	if b.from != "" {
		return "", 0, fmt.Errorf("<!-- snippet: %s %s -->: only %q takes a path", b.wrapper, b.from, snippetFrom)
	}
	wrapper, ok := snippetWrappers[b.wrapper]
	if !ok {
		return "", 0, fmt.Errorf("unknown snippet wrapper %q", b.wrapper)
	}
	before, after, _ := strings.Cut(wrapper, "//SNIPPET\n")
	src := before + b.text + after
	file, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		return "", 0, err
	}
	// Use what the fragment declares at its top level, then drop the imports it does not use.
	var used []string
	ast.Inspect(file, func(n ast.Node) bool {
		if block, ok := n.(*ast.BlockStmt); ok && len(block.List) > 0 {
			if inner, ok := block.List[0].(*ast.BlockStmt); ok {
				for _, stmt := range inner.List {
					if as, ok := stmt.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
						for _, lhs := range as.Lhs {
							if id, ok := lhs.(*ast.Ident); ok && id.Name != "_" {
								used = append(used, "_ = "+id.Name)
							}
						}
					}
				}
				return false
			}
		}
		return true
	})
	src = strings.Replace(src, "//USED\n", strings.Join(used, "\n")+"\n", 1)
	referenced := map[string]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				referenced[id.Name] = true
			}
		}
		return true
	})
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasSuffix(fields[len(fields)-1], `"`) || !strings.HasPrefix(line, "\t") || i > 25 {
			continue
		}
		path, err := strconv.Unquote(fields[len(fields)-1])
		if err != nil {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if len(fields) == 2 {
			name = fields[0]
		} else if strings.HasPrefix(name, "v") && len(name) > 1 && name[1] >= '0' && name[1] <= '9' {
			name = path[:strings.LastIndex(path, "/")]
			name = name[strings.LastIndex(name, "/")+1:]
		}
		if !referenced[name] {
			lines[i] = "" // keeps the line numbers
		}
	}
	return strings.Join(lines, "\n"), strings.Count(before, "\n") + 1, nil
}

// TestDocumentedGoBuilds builds every Go block of README.md and docs/*.md, so that a renamed
// function or a changed signature breaks the build, not the reader's copy.
func TestDocumentedGoBuilds(t *testing.T) {
	if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		t.Skipf("the blocks build in the %s module, which needs the repository's go.work (go env GOWORK: %q, %v)", snippetModule, out, err)
	}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	module, err := filepath.Abs(snippetModule)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	type built struct {
		goBlock
		dir   string
		start int
	}
	byDir := map[string]built{}
	var packages []string
	var excerpts []goBlock
	for _, page := range append([]string{"README.md"}, pages...) {
		for _, b := range goBlocks(t, page) {
			if b.wrapper == snippetFrom {
				excerpts = append(excerpts, b)
				continue
			}
			src, start, err := b.source()
			if err != nil {
				t.Errorf("%s:%d: %v", b.page, b.line, err)
				continue
			}
			dir := fmt.Sprintf("internal/docsnippet%03d", len(packages))
			file := filepath.Join(tmp, fmt.Sprintf("%03d.go", len(packages)))
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay[filepath.Join(module, dir, "snippet.go")] = file
			byDir[filepath.Base(file)] = built{b, dir, start}
			packages = append(packages, "./"+dir)
		}
	}
	if len(packages) < 6 {
		t.Fatalf("found %d Go blocks; the extraction is broken", len(packages))
	}
	checkExcerpts(t, excerpts)
	overlayJSON, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlayJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", overlayFile}, packages...)...)
	cmd.Dir = module
	out, err := cmd.CombinedOutput()
	t.Logf("built %d Go blocks of README.md and docs/", len(packages))
	if err == nil {
		return
	}
	// Errors name the overlay's file, NNN.go:LINE:COL; point at the page instead.
	location := regexp.MustCompile(`(\d{3}\.go):(\d+)(:\d+)?: (.*)`)
	reported := false
	for _, line := range strings.Split(string(out), "\n") {
		m := location.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		b := byDir[m[1]]
		n, _ := strconv.Atoi(m[2])
		t.Errorf("%s:%d: %s", b.page, b.line+n-b.start, m[4])
		reported = true
	}
	if !reported {
		t.Errorf("go build of the documented Go blocks: %v\n%s", err, out)
	}
}

// checkExcerpts fails for each block of excerpts that is not cut from its file, or whose file
// no package of the repository compiles.
func checkExcerpts(t *testing.T, excerpts []goBlock) {
	t.Helper()
	compiled := compiledFiles(t, excerpts)
	for _, b := range excerpts {
		if b.from == "" {
			t.Errorf("%s:%d: <!-- snippet: from --> names no file: <!-- snippet: from PATH -->, PATH relative to the repository root", b.page, b.line)
			continue
		}
		if _, err := os.Stat(filepath.FromSlash(b.from)); err != nil || !filepath.IsLocal(filepath.FromSlash(b.from)) {
			t.Errorf("%s:%d: <!-- snippet: from %s -->: no such file in the repository (PATH is relative to the repository root)", b.page, b.line, b.from)
			continue
		}
		if !compiled[b.from] {
			t.Errorf("%s:%d: <!-- snippet: from %s -->: not a Go file a package of the repository compiles (go list lists it in no package's GoFiles, TestGoFiles or XTestGoFiles)", b.page, b.line, b.from)
			continue
		}
		if line, err := excerptOf(b.text, readFile(t, filepath.FromSlash(b.from)), b.from); err != nil {
			t.Errorf("%s:%d: not cut from %s: %v", b.page, b.line+line, b.from, err)
		}
	}
	t.Logf("compared %d Go blocks with the files they are cut from", len(excerpts))
}

// compiledFiles returns, of the files the excerpts name, those that go list lists in a
// package of the workspace (for the build context of this machine, tests included).
func compiledFiles(t *testing.T, excerpts []goBlock) map[string]bool {
	t.Helper()
	dirs := map[string]bool{}
	var args []string
	for _, b := range excerpts {
		if !strings.HasSuffix(b.from, ".go") || !filepath.IsLocal(filepath.FromSlash(b.from)) {
			continue
		}
		dir := "./" + filepath.ToSlash(filepath.Dir(filepath.FromSlash(b.from)))
		if _, err := os.Stat(dir); err != nil || dirs[dir] {
			continue
		}
		dirs[dir] = true
		args = append(args, dir)
	}
	compiled := map[string]bool{}
	if len(args) == 0 {
		return compiled
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=Dir,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var pkg struct {
			Dir                                          string
			GoFiles, CgoFiles, TestGoFiles, XTestGoFiles []string
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatalf("go list: %v", err)
		}
		rel, err := filepath.Rel(root, pkg.Dir)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		for _, files := range [][]string{pkg.GoFiles, pkg.CgoFiles, pkg.TestGoFiles, pkg.XTestGoFiles} {
			for _, file := range files {
				compiled[filepath.ToSlash(filepath.Join(rel, file))] = true
			}
		}
	}
	return compiled
}

// excerptOf reports whether block is cut from file: its non-blank lines, trimmed of white
// space, are a contiguous run of the non-blank trimmed lines of file, where a block line
// excerptGap stands for any number of lines left out. If not, it returns the error and the
// line of the block (from 0) that does not match. name is file's name, for the error.
func excerptOf(block, file, name string) (int, error) {
	type line struct {
		n    int // in the block from 0, in the file from 1
		text string
	}
	nonBlank := func(text string, first int) []line {
		var lines []line
		for i, l := range strings.Split(text, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, line{i + first, l})
			}
		}
		return lines
	}
	// The block's runs of lines between gaps, in order.
	var runs [][]line
	run := []line{}
	for _, l := range nonBlank(block, 0) {
		if l.text == excerptGap {
			runs, run = append(runs, run), []line{}
			continue
		}
		run = append(run, l)
	}
	runs = append(runs, run)
	lines := nonBlank(file, 1)
	from, matched := 0, 0
	for r, run := range runs {
		if len(run) == 0 {
			continue
		}
		// The earliest place at or after from where run is found whole; failing that, the
		// place where most of its first lines are.
		best, bestLen := -1, -1
		for p := from; p < len(lines); p++ {
			k := 0
			for k < len(run) && p+k < len(lines) && lines[p+k].text == run[k].text {
				k++
			}
			if k > bestLen {
				best, bestLen = p, k
			}
			if k == len(run) {
				break
			}
		}
		if bestLen == len(run) {
			from = best + len(run)
			matched += len(run)
			continue
		}
		after := ""
		if r > 0 && from > 0 {
			after = fmt.Sprintf(" after line %d", lines[from-1].n)
		}
		if bestLen <= 0 {
			return run[0].n, fmt.Errorf("the block's line %q is in no line of %s%s", run[0].text, name, after)
		}
		bad := run[bestLen]
		if best+bestLen >= len(lines) {
			return bad.n, fmt.Errorf("the block's line %q follows %s:%d, where the file ends", bad.text, name, lines[best+bestLen-1].n)
		}
		next := lines[best+bestLen]
		return bad.n, fmt.Errorf("the block's line %q is, at %s:%d, %q (the lines before match %s:%d-%d; mark lines left out with a line %q)",
			bad.text, name, next.n, next.text, name, lines[best].n, lines[best+bestLen-1].n, excerptGap)
	}
	if matched == 0 {
		return 0, fmt.Errorf("the block has no line to compare")
	}
	return 0, nil
}

package handlertest_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// The package documentation shows a complete test file; first_test.go is that file, so the
// code a reader copies from go doc is the code go test compiles. Only the package clause
// differs: the reader's package, this package's tests.
func TestPackageDocShowsACompleteTest(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	in := false
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		switch {
		case strings.HasPrefix(line, "\tpackage "):
			in = true
		case in && line != "" && !strings.HasPrefix(line, "\t"):
			in = false
		}
		if in {
			shown = append(shown, strings.TrimPrefix(line, "\t"))
		}
	}
	src, err := os.ReadFile("first_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(src), "package handlertest_test", "package invoices_test", 1)
	if got := strings.TrimSpace(strings.Join(shown, "\n")); got != strings.TrimSpace(want) {
		t.Errorf("the package documentation's test is not first_test.go; the documentation shows:\n%s", got)
	}
}

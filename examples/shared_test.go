package examples_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brokerDeclarations are the declarations every broker program's main.go carries in the
// same words: the router with the inbox, the invoice table, the event and its handler.
var brokerDeclarations = []string{"newRouter", "createInvoices", "OrderPlaced", "handleOrder", "envOr"}

// brokerFiles are the files every broker program carries byte for byte: the demonstration,
// and the test of handleOrder with handlertest (one handler, so one test, in every copy).
var brokerFiles = []string{"demo.go", "handler_test.go"}

// Each broker program stands alone, so the parts they share are copies: the files of
// brokerFiles, the same in each, and the declarations of brokerDeclarations in main.go. This
// test fails for a copy that differs from the others, so that a change made to one is made
// to all.
func TestBrokerProgramsShareTheirCopies(t *testing.T) {
	var programs []string
	for _, program := range examplePrograms(t) {
		if src, err := os.ReadFile(filepath.Join(program, "demo.go")); err == nil && bytes.Contains(src, []byte("func newDemo(")) {
			programs = append(programs, program)
		}
	}
	if len(programs) < 7 {
		t.Fatalf("found %d broker programs with a demo.go (%v); the search is broken", len(programs), programs)
	}
	first := programs[0]
	declarations := declarationsOf(t, filepath.Join(first, "main.go"))
	for _, program := range programs[1:] {
		for _, file := range brokerFiles {
			if readSource(t, filepath.Join(program, file)) != readSource(t, filepath.Join(first, file)) {
				t.Errorf("%s/%s differs from %s/%s: they are copies of one file", program, file, first, file)
			}
		}
		theirs := declarationsOf(t, filepath.Join(program, "main.go"))
		for _, name := range brokerDeclarations {
			switch {
			case declarations[name] == "":
				t.Errorf("%s/main.go declares no %s", first, name)
			case theirs[name] != declarations[name]:
				t.Errorf("%s/main.go: %s differs from %s/main.go's: they are copies", program, name, first)
			}
		}
	}
	t.Logf("%d broker programs share %s and %s", len(programs), strings.Join(brokerFiles, ", "), strings.Join(brokerDeclarations, ", "))
}

func readSource(t *testing.T, path string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// declarationsOf returns the source of file's top-level functions and types, with their doc
// comments, by name.
func declarationsOf(t *testing.T, file string) map[string]string {
	t.Helper()
	src := readSource(t, file)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	text := func(from, to token.Pos) string { return src[fset.Position(from).Offset:fset.Position(to).Offset] }
	decls := map[string]string{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			from := d.Pos()
			if d.Doc != nil {
				from = d.Doc.Pos()
			}
			decls[d.Name.Name] = text(from, d.End())
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok {
					from := d.Pos()
					if d.Doc != nil {
						from = d.Doc.Pos()
					}
					decls[ts.Name.Name] = text(from, d.End())
				}
			}
		}
	}
	return decls
}

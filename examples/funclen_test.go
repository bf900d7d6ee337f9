package examples_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFunctionLines is the longest function body the examples may have, in lines between its
// braces. The examples are the code a newcomer reads first: a function that needs more is
// two ideas, and each deserves a name.
const maxFunctionLines = 60

// TestFunctionsAreShort fails for every function of the examples module (programs, packages
// and tests; function literals too) whose body is longer than maxFunctionLines. Generated
// code (a "Code generated ... DO NOT EDIT." file: ent's, sqlc's) is not ours to split.
func TestFunctionsAreShort(t *testing.T) {
	files, longest, where := 0, 0, ""
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(file) {
			return nil
		}
		files++
		ast.Inspect(file, func(n ast.Node) bool {
			name, body := function(n)
			if body == nil {
				return true
			}
			lines := fset.Position(body.Rbrace).Line - fset.Position(body.Lbrace).Line - 1
			at := fmt.Sprintf("%s:%d %s", path, fset.Position(n.Pos()).Line, name)
			if lines > maxFunctionLines {
				t.Errorf("%s: %d lines, more than %d: split it by concept", at, lines, maxFunctionLines)
			}
			if lines > longest {
				longest, where = lines, at
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d Go files; the search is broken", files)
	}
	t.Logf("%d files; the longest function: %s, %d lines", files, where, longest)
}

// function returns the name and body of a function declaration or literal, or a nil body.
func function(n ast.Node) (string, *ast.BlockStmt) {
	switch f := n.(type) {
	case *ast.FuncDecl:
		return f.Name.Name, f.Body
	case *ast.FuncLit:
		return "func literal", f.Body
	}
	return "", nil
}

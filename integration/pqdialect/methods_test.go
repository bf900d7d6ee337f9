package pqdialect_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"testing"

	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// TestEveryMethodIsWrittenHere keeps the package's claim: every exported method of
// sqlinbox.Dialect is declared in pqdialect.go, none promoted from the embedded
// sqlinbox.Postgres, which is there only for the interface's unexported method.
func TestEveryMethodIsWrittenHere(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "pqdialect.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil {
			if recv, ok := fn.Recv.List[0].Type.(*ast.Ident); ok && recv.Name == "Dialect" {
				written[fn.Name.Name] = true
			}
		}
	}
	iface := reflect.TypeFor[sqlinbox.Dialect]()
	for i := range iface.NumMethod() {
		if m := iface.Method(i); m.IsExported() && !written[m.Name] {
			t.Errorf("pqdialect.Dialect does not write %s: it is promoted from sqlinbox.Postgres", m.Name)
		}
	}
	if len(written) == 0 {
		t.Fatal("no methods of Dialect found in pqdialect.go")
	}
}

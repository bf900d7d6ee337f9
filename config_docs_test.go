package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestConfigTablesListEveryField: the README's tables of inbox.Config and sqlinbox.Config
// have a row for every exported field, so that a new field cannot go undocumented there.
func TestConfigTablesListEveryField(t *testing.T) {
	readme := readFile(t, "README.md")
	inboxStart := strings.Index(readme, "`inbox.Config`, for")
	sqlStart := strings.Index(readme, "`sqlinbox.Config`, for")
	if inboxStart < 0 || sqlStart < inboxStart {
		t.Fatal("README.md has no table of inbox.Config followed by one of sqlinbox.Config")
	}
	sqlEnd := sqlStart + strings.Index(readme[sqlStart:], "\n## ")
	tables := map[string]string{
		"middleware.go":      readme[inboxStart:sqlStart],
		"sqlinbox/config.go": readme[sqlStart:sqlEnd],
	}
	for file, table := range tables {
		fields := configFields(t, file)
		if len(fields) < 3 {
			t.Fatalf("%s: found %d fields of Config; the parse is broken", file, len(fields))
		}
		for _, field := range fields {
			if !strings.Contains(table, "| `"+field+"` |") {
				t.Errorf("README.md's Config table for %s has no row for %s", file, field)
			}
		}
	}
}

// configFields returns the exported fields of the type Config declared in file.
func configFields(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.TypeSpec)
		if !ok || spec.Name.Name != "Config" {
			return true
		}
		for _, field := range spec.Type.(*ast.StructType).Fields.List {
			for _, name := range field.Names {
				if name.IsExported() {
					fields = append(fields, name.Name)
				}
			}
		}
		return false
	})
	return fields
}

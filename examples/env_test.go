package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/inboxkit/watermill-inbox/internal/testenv"
)

// flagDefault is where a flag's default comes from: envOr(variable, fallback), or fallback
// alone when variable is "".
type flagDefault struct{ variable, fallback string }

func (d flagDefault) String() string {
	if d.variable == "" {
		return strconv.Quote(d.fallback)
	}
	return "envOr(" + strconv.Quote(d.variable) + ", " + strconv.Quote(d.fallback) + ")"
}

// serviceFlags says, for each flag of the example programs that addresses a service, the
// variable the tests read it from and its default there.
var serviceFlags = map[string]flagDefault{
	"postgres": {testenv.PostgresURLVar, testenv.DefaultPostgresURL},
	"amqp":     {testenv.AMQPURLVar, testenv.DefaultAMQPURL},
	"nats":     {testenv.NATSURLVar, testenv.DefaultNATSURL},
	"redis":    {testenv.RedisAddrVar, testenv.DefaultRedisAddr},
	"kafka":    {"", kafkaDefault}, // no variable: the Kafka tests run in-process
}

// The example programs find their services where the tests do: the default of each flag
// that addresses a service is envOr(the INBOX_TEST_* variable internal/testenv reads, its
// default there), so that a program and the tests agree whatever the environment, and
// docker-compose.yml publishes it (TestComposePublishesDefaults).
func TestExamplesReadTheTestVariables(t *testing.T) {
	checked := 0
	for _, program := range examplePrograms(t) {
		files, err := filepath.Glob(filepath.Join(program, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			checked += checkServiceFlags(t, file)
		}
	}
	if checked < 15 {
		t.Errorf("checked %d service flags; the search is broken", checked)
	}
}

// checkServiceFlags checks the service flags that file declares, and returns how many.
func checkServiceFlags(t *testing.T, file string) int {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	ast.Inspect(f, func(n ast.Node) bool {
		name, def, ok := stringFlag(n)
		if !ok {
			return true
		}
		want, ok := serviceFlags[name]
		if !ok {
			return true
		}
		checked++
		got := defaultOf(def)
		if got != want {
			t.Errorf("%s: flag -%s defaults to %s, want %s", fset.Position(n.Pos()), name, got, want)
		}
		return true
	})
	return checked
}

// stringFlag reports whether n is flag.String(name, default, ...) or flag.StringVar(p,
// name, default, ...) with a literal name.
func stringFlag(n ast.Node) (name string, def ast.Expr, ok bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return "", nil, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !isIdent(sel.X, "flag") {
		return "", nil, false
	}
	args := call.Args
	switch {
	case sel.Sel.Name == "String" && len(args) == 3:
	case sel.Sel.Name == "StringVar" && len(args) == 4:
		args = args[1:]
	default:
		return "", nil, false
	}
	name, ok = stringLiteral(args[0])
	return name, args[1], ok
}

// defaultOf reads a flag's default: envOr("VAR", "fallback"), or a string literal (no
// variable).
func defaultOf(e ast.Expr) flagDefault {
	if s, ok := stringLiteral(e); ok {
		return flagDefault{"", s}
	}
	call, ok := e.(*ast.CallExpr)
	if !ok || !isIdent(call.Fun, "envOr") || len(call.Args) != 2 {
		return flagDefault{"?", "?"}
	}
	variable, _ := stringLiteral(call.Args[0])
	fallback, _ := stringLiteral(call.Args[1])
	return flagDefault{variable, fallback}
}

func stringLiteral(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

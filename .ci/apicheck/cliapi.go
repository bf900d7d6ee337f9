package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
)

// What a command-line tool promises is its commands, their flags with their types and
// defaults, the environment variables it reads and its exit statuses (and, where it lets
// programs import the package that builds them, that package's Go API, listed as a
// library's). cliAPI reads them from the code of the package that builds the commands, the
// main package or one it calls, in the form the tool's code has:
//
//   - a command is a function or method that calls newCommand("name"); the flags newCommand
//     itself defines are every command's;
//   - a flag is a definition on a *flag.FlagSet (String, IntVar, Duration, ...);
//   - an exit status is a constant named exit...; an environment variable a string constant
//     named ...Var.
//
// A flag defined anywhere else fails the check, so that no flag escapes the file.
const (
	commandConstructor = "newCommand"
	exitPrefix         = "exit"
	envSuffix          = "Var"
)

// flagTypes are the definitions of a flag.FlagSet: the index of the flag's name among the
// arguments, of its default (-1: none), and the type the flag takes ("" for Var and
// TextVar: the value's).
var flagTypes = map[string]struct {
	name, value int
	typ         string
}{
	"Bool": {0, 1, "bool"}, "BoolVar": {1, 2, "bool"},
	"Duration": {0, 1, "duration"}, "DurationVar": {1, 2, "duration"},
	"Float64": {0, 1, "float64"}, "Float64Var": {1, 2, "float64"},
	"Int": {0, 1, "int"}, "IntVar": {1, 2, "int"},
	"Int64": {0, 1, "int64"}, "Int64Var": {1, 2, "int64"},
	"String": {0, 1, "string"}, "StringVar": {1, 2, "string"},
	"Uint": {0, 1, "uint"}, "UintVar": {1, 2, "uint"},
	"Uint64": {0, 1, "uint64"}, "Uint64Var": {1, 2, "uint64"},
	"Func": {0, -1, "func"}, "BoolFunc": {0, -1, "bool func"},
	"Var": {1, -1, ""}, "TextVar": {1, 2, ""},
}

// buildsCommands reports whether pkg defines newCommand, as a function or a method.
func buildsCommands(pkg *packages.Package) bool {
	for _, file := range pkg.Syntax {
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == commandConstructor {
				return true
			}
		}
	}
	return false
}

// cliAPI returns the lines of the tool named name whose commands pkg builds: "cmd NAME,
// command C", "cmd NAME, flag C -f TYPE = DEFAULT", "cmd NAME, env V", "cmd NAME, exit N
// exitName", sorted.
func cliAPI(name string, pkg *packages.Package) ([]string, error) {
	prefix := "cmd " + name + ", "
	var lines []string
	scope := pkg.Types.Scope()
	for _, name := range scope.Names() {
		c, ok := scope.Lookup(name).(*types.Const)
		switch {
		case !ok:
		case strings.HasPrefix(name, exitPrefix):
			lines = append(lines, fmt.Sprintf("%sexit %s %s", prefix, c.Val().ExactString(), name))
		case strings.HasSuffix(name, envSuffix) && c.Val().Kind() == constant.String:
			lines = append(lines, prefix+"env "+constant.StringVal(c.Val()))
		}
	}

	type flagDef struct{ fn, line string }
	var commands []string
	var common, flags []flagDef
	commandOf := map[string]string{} // function name -> the command it builds
	var problems []string
	for _, file := range pkg.Syntax {
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				callee := typeutil.StaticCallee(pkg.TypesInfo, call)
				if callee == nil {
					return true
				}
				if callee.Pkg() == pkg.Types && callee.Name() == commandConstructor && len(call.Args) == 1 {
					if name, ok := stringConst(pkg.TypesInfo, call.Args[0]); ok {
						commandOf[fn.Name.Name] = name
						commands = append(commands, name)
					}
					return true
				}
				def, ok := flagTypes[callee.Name()]
				if !ok || !isFlagSetMethod(callee) {
					return true
				}
				name, ok := stringConst(pkg.TypesInfo, call.Args[def.name])
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: a flag whose name is not a constant", pkg.Fset.Position(call.Pos())))
					return true
				}
				typ := def.typ
				if typ == "" {
					typ = types.TypeString(pkg.TypesInfo.TypeOf(call.Args[0]), types.RelativeTo(pkg.Types))
				}
				line := "-" + name + " " + typ
				if def.value >= 0 {
					line += " = " + flagDefault(pkg.TypesInfo, call.Args[def.value], def.typ)
				}
				d := flagDef{fn.Name.Name, line}
				if fn.Name.Name == commandConstructor {
					common = append(common, d)
				} else {
					flags = append(flags, d)
				}
				return true
			})
		}
	}
	if len(commands) == 0 {
		return nil, fmt.Errorf("%s: no call of %s(\"name\"): the tool's commands are not where cliAPI looks", pkg.PkgPath, commandConstructor)
	}
	for _, c := range commands {
		lines = append(lines, prefix+"command "+c)
		for _, d := range common {
			lines = append(lines, prefix+"flag "+c+" "+d.line)
		}
	}
	for _, d := range flags {
		c, ok := commandOf[d.fn]
		if !ok {
			problems = append(problems, fmt.Sprintf("flag %s is defined in %s, which builds no command (%s)", d.line, d.fn, commandConstructor))
			continue
		}
		lines = append(lines, prefix+"flag "+c+" "+d.line)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

func isFlagSetMethod(f *types.Func) bool {
	recv := f.Signature().Recv()
	if recv == nil {
		return false
	}
	ptr, ok := recv.Type().(*types.Pointer)
	if !ok {
		return false
	}
	named, ok := ptr.Elem().(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "flag" && named.Obj().Name() == "FlagSet"
}

func stringConst(info *types.Info, e ast.Expr) (string, bool) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

// flagDefault writes a flag's default as -h would show it: a constant's value (a duration
// as a duration), else the expression as written.
func flagDefault(info *types.Info, e ast.Expr, typ string) string {
	tv := info.Types[e]
	switch {
	case tv.Value == nil:
		return types.ExprString(e)
	case tv.Value.Kind() == constant.String:
		return strconv.Quote(constant.StringVal(tv.Value))
	case typ == "duration":
		if ns, ok := constant.Int64Val(tv.Value); ok {
			return time.Duration(ns).String()
		}
	}
	return tv.Value.ExactString()
}

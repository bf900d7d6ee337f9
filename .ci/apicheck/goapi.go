package main

import (
	"fmt"
	"go/constant"
	"go/types"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"
)

// goAPI returns the exported API of pkgs, one line per identifier, in the form of Go's own
// api/*.txt files: "pkg PATH, KIND ...". Parameter names are left out (renaming one changes
// no caller); types are qualified by package name. It lists:
//
//   - every exported const (type and exact value), var, func and type;
//   - a struct's exported fields, its promoted ones too (from embedded unexported structs),
//     and "embedded T" for each exported embedded type;
//   - an interface's methods, embedded ones included;
//   - every method in a type's method set, promoted ones included, as (T) or (*T);
//   - the same for the unexported types an exported signature, field or var reaches, whose
//     exported fields and methods a caller can use.
func goAPI(pkgs []*packages.Package) []string {
	var lines []string
	for _, pkg := range pkgs {
		lines = append(lines, packageAPI(pkg.Types)...)
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// apiPrinter prints the API of one package.
type apiPrinter struct {
	pkg   *types.Package
	lines []string
	// reached are the package's unexported named types an exported identifier reaches, in
	// the order found; queued marks them.
	reached []*types.TypeName
	queued  map[*types.TypeName]bool
}

func packageAPI(pkg *types.Package) []string {
	p := &apiPrinter{pkg: pkg, queued: map[*types.TypeName]bool{}}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			p.emit("const %s %s = %s", obj.Name(), p.typ(obj.Type()), constValue(obj.Val()))
			p.reach(obj.Type())
		case *types.Var:
			p.emit("var %s %s", obj.Name(), p.typ(obj.Type()))
			p.reach(obj.Type())
		case *types.Func:
			sig := obj.Type().(*types.Signature)
			p.emit("func %s%s%s", obj.Name(), p.typeParams(sig.TypeParams()), p.signature(sig))
			p.reach(sig)
		case *types.TypeName:
			p.typeName(obj)
		}
	}
	for i := 0; i < len(p.reached); i++ { // typeName may reach more
		p.typeName(p.reached[i])
	}
	return p.lines
}

func (p *apiPrinter) emit(format string, args ...any) {
	p.lines = append(p.lines, "pkg "+p.pkg.Path()+", "+fmt.Sprintf(format, args...))
}

// typ writes t as Go's api files do: other packages' types qualified by their name, and
// function types without parameter names.
func (p *apiPrinter) typ(t types.Type) string {
	var b strings.Builder
	p.writeType(&b, t)
	return b.String()
}

func (p *apiPrinter) qualifier(other *types.Package) string {
	if other == p.pkg {
		return ""
	}
	return other.Name()
}

func (p *apiPrinter) writeType(b *strings.Builder, t types.Type) {
	switch t := t.(type) {
	case *types.Named:
		b.WriteString(types.TypeString(t.Origin(), p.qualifier))
		if args := t.TypeArgs(); args.Len() > 0 {
			b.WriteString("[")
			for i := range args.Len() {
				if i > 0 {
					b.WriteString(", ")
				}
				p.writeType(b, args.At(i))
			}
			b.WriteString("]")
		}
	case *types.Alias:
		b.WriteString(types.TypeString(t, p.qualifier))
	case *types.Pointer:
		b.WriteString("*")
		p.writeType(b, t.Elem())
	case *types.Slice:
		b.WriteString("[]")
		p.writeType(b, t.Elem())
	case *types.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		p.writeType(b, t.Elem())
	case *types.Map:
		b.WriteString("map[")
		p.writeType(b, t.Key())
		b.WriteString("]")
		p.writeType(b, t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			b.WriteString("chan<- ")
		case types.RecvOnly:
			b.WriteString("<-chan ")
		default:
			b.WriteString("chan ")
		}
		p.writeType(b, t.Elem())
	case *types.Signature:
		b.WriteString("func")
		b.WriteString(p.signature(t))
	case *types.Struct:
		b.WriteString("struct{")
		for i := range t.NumFields() {
			f := t.Field(i)
			if i > 0 {
				b.WriteString(";")
			}
			b.WriteString(" ")
			if !f.Embedded() {
				b.WriteString(f.Name() + " ")
			}
			p.writeType(b, f.Type())
		}
		if t.NumFields() > 0 {
			b.WriteString(" ")
		}
		b.WriteString("}")
	case *types.Interface:
		if !t.IsMethodSet() || t.NumEmbeddeds() > 0 { // a constraint, or embeds one
			b.WriteString(types.TypeString(t, p.qualifier))
			return
		}
		b.WriteString("interface{")
		for i := range t.NumMethods() {
			m := t.Method(i)
			if i > 0 {
				b.WriteString(";")
			}
			b.WriteString(" " + m.Name() + p.signature(m.Type().(*types.Signature)))
		}
		if t.NumMethods() > 0 {
			b.WriteString(" ")
		}
		b.WriteString("}")
	default: // basic types, type parameters, unions
		b.WriteString(types.TypeString(t, p.qualifier))
	}
}

// typeName prints a type, and its fields and methods.
func (p *apiPrinter) typeName(obj *types.TypeName) {
	if obj.IsAlias() {
		p.emit("type %s = %s", obj.Name(), p.typ(types.Unalias(obj.Type())))
		p.reach(obj.Type())
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return
	}
	head := obj.Name() + p.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		p.emit("type %s struct", head)
		p.fields(head, u, map[*types.Struct]bool{})
	case *types.Interface:
		var names []string
		sealed := false
		for m := range u.Methods() {
			if m.Exported() {
				names = append(names, m.Name())
			} else {
				sealed = true
			}
		}
		if sealed { // no type outside the package can implement it
			names = append(names, "unexported methods")
		}
		if u.IsMethodSet() {
			p.emit("type %s interface { %s }", head, strings.Join(names, ", "))
		} else { // a constraint: its type set is the API
			p.emit("type %s %s", head, p.typ(u))
		}
		for m := range u.Methods() {
			if m.Exported() {
				sig := m.Type().(*types.Signature)
				p.emit("type %s interface, %s%s", head, m.Name(), p.signature(sig))
				p.reach(sig)
			}
		}
		return // an interface's methods are not a method set of its own
	default:
		p.emit("type %s %s", head, p.typ(u))
		p.reach(u)
	}
	p.methods(named)
}

// fields prints the exported fields of s as fields of the type head, with those promoted
// from embedded unexported structs; seen stops a cycle of embedded pointers.
func (p *apiPrinter) fields(head string, s *types.Struct, seen map[*types.Struct]bool) {
	if seen[s] {
		return
	}
	seen[s] = true
	for f := range s.Fields() {
		switch {
		case f.Embedded() && f.Exported():
			p.emit("type %s struct, embedded %s", head, p.typ(f.Type()))
			p.reach(f.Type())
		case f.Embedded():
			if inner, ok := derefStruct(f.Type()); ok {
				p.fields(head, inner, seen)
			}
		case f.Exported():
			p.emit("type %s struct, %s %s", head, f.Name(), p.typ(f.Type()))
			p.reach(f.Type())
		}
	}
}

func derefStruct(t types.Type) (*types.Struct, bool) {
	if ptr, ok := types.Unalias(t).(*types.Pointer); ok {
		t = ptr.Elem()
	}
	s, ok := types.Unalias(t).Underlying().(*types.Struct)
	return s, ok
}

// methods prints every exported method of named's method set, promoted ones included: (T)
// for those of the value's set, (*T) for those only the pointer has.
func (p *apiPrinter) methods(named *types.Named) {
	value := types.NewMethodSet(named)
	pointer := types.NewMethodSet(types.NewPointer(named))
	recv := named.Obj().Name()
	if tps := named.TypeParams(); tps.Len() > 0 {
		var names []string
		for tp := range tps.TypeParams() {
			names = append(names, tp.Obj().Name())
		}
		recv += "[" + strings.Join(names, ", ") + "]"
	}
	for sel := range pointer.Methods() {
		m := sel.Obj().(*types.Func)
		if !m.Exported() {
			continue
		}
		r := "*" + recv
		if value.Lookup(m.Pkg(), m.Name()) != nil {
			r = recv
		}
		sig := sel.Type().(*types.Signature)
		p.emit("method (%s) %s%s", r, m.Name(), p.signature(sig))
		p.reach(sig)
	}
}

// typeParams writes [T any, U comparable], or nothing.
func (p *apiPrinter) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	var parts []string
	for tp := range tps.TypeParams() {
		parts = append(parts, tp.Obj().Name()+" "+p.typ(tp.Constraint()))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature writes (A, B) R or (A, ...B) (R, error), without names.
func (p *apiPrinter) signature(sig *types.Signature) string {
	var params []string
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			params = append(params, "..."+p.typ(t.(*types.Slice).Elem()))
			continue
		}
		params = append(params, p.typ(t))
	}
	s := "(" + strings.Join(params, ", ") + ")"
	var results []string
	for v := range sig.Results().Variables() {
		results = append(results, p.typ(v.Type()))
	}
	switch len(results) {
	case 0:
	case 1:
		s += " " + results[0]
	default:
		s += " (" + strings.Join(results, ", ") + ")"
	}
	return s
}

// reach queues the package's unexported named types that t refers to.
func (p *apiPrinter) reach(t types.Type) {
	switch t := t.(type) {
	case *types.Alias:
		p.reach(types.Unalias(t))
	case *types.Named:
		obj := t.Origin().Obj()
		if obj.Pkg() == p.pkg && !obj.Exported() && !p.queued[obj] {
			p.queued[obj] = true
			p.reached = append(p.reached, obj)
		}
		for arg := range t.TypeArgs().Types() {
			p.reach(arg)
		}
	case *types.Pointer:
		p.reach(t.Elem())
	case *types.Slice:
		p.reach(t.Elem())
	case *types.Array:
		p.reach(t.Elem())
	case *types.Chan:
		p.reach(t.Elem())
	case *types.Map:
		p.reach(t.Key())
		p.reach(t.Elem())
	case *types.Signature:
		for v := range t.Params().Variables() {
			p.reach(v.Type())
		}
		for v := range t.Results().Variables() {
			p.reach(v.Type())
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() || f.Embedded() {
				p.reach(f.Type())
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			p.reach(m.Type())
		}
	case *types.TypeParam:
		p.reach(t.Constraint())
	}
}

// constValue writes a constant's exact value: strings quoted, numbers exact.
func constValue(v constant.Value) string {
	if v.Kind() == constant.String {
		return strconv.Quote(constant.StringVal(v))
	}
	return v.ExactString()
}

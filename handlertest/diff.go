package handlertest

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// maxDifferences bounds what one report lists.
const maxDifferences = 12

// differences describes how got differs from want, one line per path, such as
// "Invoices: 2 rows, want 1" or "Balances[acct-1]: 12, want 10"; nil when they are
// [reflect.DeepEqual]. It reads unexported fields through reflect, and never writes.
func differences(got, want any) []string {
	if reflect.DeepEqual(got, want) {
		return nil
	}
	d := &differ{}
	d.walk("", reflect.ValueOf(got), reflect.ValueOf(want), 0)
	if len(d.lines) == 0 { // DeepEqual saw a difference the walk does not name (a func, a cycle)
		d.add("", "%s, want %s", show(reflect.ValueOf(got)), show(reflect.ValueOf(want)))
	}
	if d.more > 0 {
		d.lines = append(d.lines, fmt.Sprintf("(and %d more)", d.more))
	}
	return d.lines
}

type differ struct {
	lines []string
	more  int
}

func (d *differ) add(path, format string, args ...any) {
	if len(d.lines) >= maxDifferences {
		d.more++
		return
	}
	if path == "" {
		path = "snapshot"
	}
	d.lines = append(d.lines, path+": "+fmt.Sprintf(format, args...))
}

// maxDepth stops the walk in values that nest without end (a cycle through pointers).
const maxDepth = 32

func (d *differ) walk(path string, got, want reflect.Value, depth int) {
	if depth > maxDepth || equal(got, want, 0) {
		return
	}
	if !got.IsValid() || !want.IsValid() {
		d.add(path, "%s, want %s", show(got), show(want))
		return
	}
	if got.Type() != want.Type() {
		d.add(path, "%s (%s), want %s (%s)", show(got), got.Type(), show(want), want.Type())
		return
	}
	switch got.Kind() {
	case reflect.Pointer, reflect.Interface:
		if got.IsNil() || want.IsNil() {
			d.add(path, "%s, want %s", show(got), show(want))
			return
		}
		d.walk(path, got.Elem(), want.Elem(), depth+1)
	case reflect.Struct:
		if !hasExportedField(got.Type()) { // time.Time and the like: one value
			d.add(path, "%s, want %s", show(got), show(want))
			return
		}
		for i := range got.NumField() {
			d.walk(join(path, got.Type().Field(i).Name), got.Field(i), want.Field(i), depth+1)
		}
	case reflect.Slice, reflect.Array:
		if got.Len() != want.Len() {
			d.add(path, "%d rows, want %d%s", got.Len(), want.Len(), rowsApart(got, want))
			return
		}
		if got.Kind() == reflect.Slice && got.Len() == 0 {
			d.add(path, "%s, want %s", emptiness(got), emptiness(want))
			return
		}
		for i := range got.Len() {
			d.walk(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i), depth+1)
		}
	case reflect.Map:
		for _, k := range sortedKeys(got, want) {
			g, w := got.MapIndex(k), want.MapIndex(k)
			p := fmt.Sprintf("%s[%v]", path, show(k))
			switch {
			case !w.IsValid():
				d.add(p, "%s, want none", show(g))
			case !g.IsValid():
				d.add(p, "none, want %s", show(w))
			default:
				d.walk(p, g, w, depth+1)
			}
		}
	default:
		d.add(path, "%s, want %s", show(got), show(want))
	}
}

// rowsApart names the rows only one side has, as "(extra: ...; missing: ...)".
func rowsApart(got, want reflect.Value) string {
	extra, missing := unmatched(got, want), unmatched(want, got)
	var parts []string
	if len(extra) > 0 {
		parts = append(parts, "extra: "+strings.Join(extra, ", "))
	}
	if len(missing) > 0 {
		parts = append(parts, "missing: "+strings.Join(missing, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// unmatched returns the elements of a that no element of b matches (each match used
// once), at most 3, shown.
func unmatched(a, b reflect.Value) []string {
	used := make([]bool, b.Len())
	var out []string
	for i := range a.Len() {
		found := false
		for j := range b.Len() {
			if !used[j] && equal(a.Index(i), b.Index(j), 0) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			if len(out) == 3 {
				out = append(out, "...")
				break
			}
			out = append(out, show(a.Index(i)))
		}
	}
	return out
}

func emptiness(v reflect.Value) string {
	if v.IsNil() {
		return "nil"
	}
	return "empty"
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func hasExportedField(t reflect.Type) bool {
	for i := range t.NumField() {
		if t.Field(i).IsExported() {
			return true
		}
	}
	return false
}

func sortedKeys(maps ...reflect.Value) []reflect.Value {
	var keys []reflect.Value
	seen := map[string]bool{}
	for _, m := range maps {
		for _, k := range m.MapKeys() {
			s := show(k)
			if !seen[s] {
				seen[s] = true
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(show(a), show(b)) })
	return keys
}

// show formats a value for a report; fmt prints a [reflect.Value] as the value it holds,
// unexported fields included.
func show(v reflect.Value) string {
	if !v.IsValid() {
		return "nil"
	}
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%+v", v)
}

// equal is [reflect.DeepEqual] on [reflect.Value] values, which may come from unexported fields
// (whose Interface reflect refuses).
func equal(a, b reflect.Value, depth int) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	if depth > maxDepth {
		return false
	}
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		if a.Kind() == reflect.Pointer && a.Pointer() == b.Pointer() {
			return true
		}
		return equal(a.Elem(), b.Elem(), depth+1)
	case reflect.Struct:
		for i := range a.NumField() {
			if !equal(a.Field(i), b.Field(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() {
			return false
		}
		fallthrough
	case reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equal(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !equal(a.MapIndex(k), bv, depth+1) {
				return false
			}
		}
		return true
	case reflect.Func:
		return a.IsNil() && b.IsNil()
	case reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	}
	return false
}

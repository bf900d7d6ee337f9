package sqlinbox

import "reflect"

// errorChain returns err and every error it wraps, depth first.
func errorChain(err error) []error {
	var chain []error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		chain = append(chain, err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return chain
}

// errorFields returns the struct values of the errors in err's chain (a pointer's target), so
// that a dialect reads a driver's exported error fields without importing the driver.
func errorFields(err error) []reflect.Value {
	var fields []reflect.Value
	for _, e := range errorChain(err) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			fields = append(fields, v)
		}
	}
	return fields
}

package sqlinbox

import "fmt"

// checkDialect refuses a dialect that cannot be used: nil, or one that embeds the [Dialect]
// interface (or a pointer to a shipped dialect) left nil, whose every promoted method would
// panic. The unexported method cannot be overridden outside this package, so calling it
// reaches the embedded value whatever the embedding type overrides.
func checkDialect(dialect Dialect) (err error) {
	if dialect == nil {
		return errNoDialect
	}
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("sqlinbox: dialect %T has no dialect inside: it embeds a Dialect or a pointer that is nil; "+
				"embed a shipped dialect by value (struct{ sqlinbox.Postgres }), whose zero value is ready to use", dialect)
		}
	}()
	dialect.dialect()
	return nil
}

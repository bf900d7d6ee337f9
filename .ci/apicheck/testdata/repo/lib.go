// Package lib is the fixture's library: one identifier of each kind the API files list.
package lib

import (
	"context"
	"io"
	"time"
)

// Constants: untyped, typed, a duration, a string.
const (
	Answer          = 42
	Name     string = "lib"
	Timeout         = 10 * time.Second
	internal        = 1
)

// Greet is the function whose signature the test changes.
func Greet(name string) string { return "hello " + name }

// Variadic takes a format and its arguments.
func Variadic(format string, args ...any) {}

// Map is generic.
func Map[T, U any](in []T, f func(T) U) []U { return nil }

// Default is a var.
var Default = &Widget{}

// Widget has fields of every kind: exported, unexported, embedded exported and unexported.
type Widget struct {
	ID     int
	hidden int
	base
	*Exported
	Handler func(ctx context.Context, n int) (ok bool, err error)
	Done    <-chan struct{}
}

// Close is a method of the pointer.
func (w *Widget) Close() error { return nil }

// base is unexported; its exported field and method are promoted onto Widget.
type base struct{ Level int }

// Describe is promoted onto Widget and *Widget.
func (base) Describe() string { return "" }

// Exported is embedded by pointer.
type Exported struct{ Label string }

// Rename is promoted onto Widget through the embedded pointer.
func (*Exported) Rename(string) {}

// Set is a generic type with a method.
type Set[T comparable] struct{ items map[T]bool }

// Add adds v.
func (s *Set[T]) Add(v T) {}

// Number is a constraint.
type Number interface{ ~int | ~float64 }

// ReadCloser embeds io.Closer.
type ReadCloser interface {
	Read(p []byte) (n int, err error)
	io.Closer
}

// Sealed cannot be implemented outside the package.
type Sealed interface {
	Kind() string
	seal()
}

// NewCounter returns an unexported type, whose exported field and method a caller uses.
func NewCounter() *counter { return &counter{} }

type counter struct{ N int }

// Inc adds one.
func (c *counter) Inc() int { c.N++; return c.N }

// Alias is another name for Widget.
type Alias = Widget

// Level is a defined type with a value method.
type Level int

// String names the level.
func (l Level) String() string { return "" }

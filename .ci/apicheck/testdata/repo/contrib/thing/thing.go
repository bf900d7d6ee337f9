// Package thing is a contrib module of the fixture.
package thing

// Thing is the module's one identifier.
func Thing() bool { return true }

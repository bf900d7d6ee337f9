// Package hidden is internal: no line of the API.
package hidden

// Visible would be API anywhere else.
func Visible() {}

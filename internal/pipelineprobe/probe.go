// Package pipelineprobe lets the repository's tests outside package sqlinbox see into the
// queue of a store that coalesces requests (sqlinbox.NewPgxPipeline,
// sqlinbox.NewMultiStatementCoalesced): how many wait, and how many each request carries.
// Package sqlinbox sets the functions; nothing else may.
package pipelineprobe

var (
	// Waiting returns how many requests wait for the store's next request.
	Waiting func(store any) int
	// Observe calls observe with the number of requests each request of the store carries,
	// before it is sent. Call it before the store's first message.
	Observe func(store any, observe func(requests int))
)

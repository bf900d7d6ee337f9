package inbox

import "errors"

// Errors returned for a message the middleware cannot claim. The middleware returns them
// from the handler, so the router nacks the message; none of them is ever an ack.
var (
	// ErrEmptyKey is returned when the key function gives "" (a message without a UUID,
	// by default). Nothing is claimed and the handler does not run.
	ErrEmptyKey = errors.New("inbox: message has an empty idempotency key")

	// ErrKeyTooLong is returned, wrapped with the length, when a key is longer than
	// MaxKeyLength bytes. The key is never truncated: two long keys that share a prefix
	// would otherwise collide.
	ErrKeyTooLong = errors.New("inbox: idempotency key is too long")

	// ErrInvalidKey is returned, wrapped with the reason, when a key is not valid UTF-8
	// or contains a NUL byte, which not every database can store.
	ErrInvalidKey = errors.New("inbox: idempotency key is not valid")

	// ErrNoConsumer is returned when Config.Consumer is empty and the message did not
	// come through a router handler, so there is no name to partition the inbox by.
	ErrNoConsumer = errors.New("inbox: no consumer name: set Config.Consumer or run the middleware in a router handler")

	// ErrInvalidConsumer is returned, wrapped with the reason, for a consumer name that
	// is longer than MaxConsumerLength bytes, not valid UTF-8, or contains a NUL byte.
	ErrInvalidConsumer = errors.New("inbox: consumer name is not valid")

	// ErrInvalidTableName is returned, wrapped with the name, by ValidateTableName and by
	// the store constructors in sqlinbox.
	ErrInvalidTableName = errors.New("inbox: invalid table name")

	// ErrNilStore is returned by NewMiddleware when the store is nil.
	ErrNilStore = errors.New("inbox: store is nil")
)

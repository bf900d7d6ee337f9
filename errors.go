package inbox

import (
	"encoding/hex"
	"errors"
	"fmt"
)

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

	// ErrNoConsumer is wrapped by the error of NewMiddleware for a Config with neither
	// Consumer nor ConsumerFromHandler, and by the error for a message that
	// ConsumerFromHandler gives no consumer (a router handler missing from
	// ConsumerByHandler's map, a renamed one, say) or that came through no router handler.
	// Such a message is nacked before any claim: it is never processed under a consumer
	// nobody named.
	ErrNoConsumer = errors.New("inbox: no consumer name")

	// ErrInvalidConsumer is returned, wrapped with the reason, for a consumer name that
	// is longer than MaxConsumerLength bytes, not valid UTF-8, or contains a NUL byte.
	ErrInvalidConsumer = errors.New("inbox: consumer name is not valid")

	// ErrTxEndedByHandler is wrapped by the error a store's Commit or Rollback returns when
	// the handler committed or rolled back the inbox transaction itself. The transaction
	// belongs to the middleware; the message is nacked, and its redelivery is either a
	// duplicate (the handler committed) or processed again (it rolled back).
	ErrTxEndedByHandler = errors.New("inbox: the handler ended the inbox transaction itself")

	// ErrFingerprintMismatch is matched (errors.Is) by every *FingerprintMismatchError.
	ErrFingerprintMismatch = errors.New("inbox: duplicate key with a different payload")

	// ErrNoInboxTx is returned by Queue for a context that does not come from the inbox
	// middleware.
	ErrNoInboxTx = errors.New("inbox: no inbox transaction in the context")

	// ErrClaimEnded is wrapped by the error of Queue and Publisher.Publish when they are
	// called with a message's context after its handler returned (from a goroutine the
	// handler left running, say): the claim's transaction is over, and what they would add
	// could not commit with it.
	ErrClaimEnded = errors.New("inbox: the handler of this claim has returned")
)

// Errors of Publisher. Those returned inside a claim fail the handler's Publish call; the
// handler returns them, so the message is nacked.
var (
	// ErrNoHandlerContext is wrapped by the error of Publisher.Publish for a message whose
	// context carries no inbox claim and does not come from PublishNow: a message built in a
	// handler without msg.SetContext(handlerMsg.Context()), which would otherwise leave
	// before the commit, and also when the handler then fails. Nothing is published.
	ErrNoHandlerContext = errors.New("inbox: message published through inbox.Publisher without an inbox handler's context")

	// ErrEmptyMessageUUID is returned by Publisher.Publish inside a claim for a message with
	// an empty UUID: downstream inboxes could not recognise its copies.
	ErrEmptyMessageUUID = errors.New("inbox: a message published inside an inbox handler has an empty UUID")

	// ErrEmptyTopic is returned by Publisher.Publish inside a claim for an empty topic.
	ErrEmptyTopic = errors.New("inbox: publish to an empty topic")

	// ErrPublisherMismatch is wrapped by the error of Publisher.Publish inside the claim of
	// an inbox on another Store than the one the Publisher records with, or of an inbox
	// that publishes through another Publisher, and by NewMiddleware for a Config.Publisher
	// bound to another Store.
	ErrPublisherMismatch = errors.New("inbox: publisher belongs to another inbox")

	// ErrNoPublisher is wrapped by the error for a duplicate whose committed run published
	// messages through a Publisher when this inbox knows no Publisher yet (set
	// Config.Publisher). The message is nacked, never acked without its messages.
	ErrNoPublisher = errors.New("inbox: recorded messages to publish again, but this inbox has no Publisher (set Config.Publisher)")
)

// FingerprintMismatchError reports a message whose key was processed before with a
// different payload: a producer that reuses IDs, or a key function that is not specific
// enough. What the middleware does with it is Config.OnFingerprintMismatch.
type FingerprintMismatchError struct {
	Consumer string
	Key      string
	// Stored is the fingerprint of the payload processed first; Received the new one's.
	Stored, Received []byte
}

func (e *FingerprintMismatchError) Error() string {
	return fmt.Sprintf("inbox: key %q of consumer %q was processed with payload fingerprint %s, this copy has %s",
		e.Key, e.Consumer, hex.EncodeToString(e.Stored), hex.EncodeToString(e.Received))
}

// Is makes errors.Is(err, ErrFingerprintMismatch) true.
func (e *FingerprintMismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

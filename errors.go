package inbox

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors the middleware returns for a message it cannot claim, and for misuse inside a
// handler. The middleware returns them from the handler, so the router nacks the message;
// none of them is ever an ack.
var (
	// ErrInvalidKey is wrapped, with the reason, by the error for a message whose idempotency
	// key cannot be claimed: empty (a message without a UUID, by default), longer than
	// [MaxKeyLength] bytes, not valid UTF-8, holding a NUL byte, which not every database
	// can store, or holding another control character (C0 such as a newline or ESC, DEL, or
	// C1: U+0080 to U+009F), which would reach log lines and terminals raw. Nothing is
	// claimed and the handler does not run. A long key is never truncated: two long keys that
	// share a prefix would otherwise collide.
	ErrInvalidKey = errors.New("inbox: invalid idempotency key")

	// ErrNoConsumer is wrapped by the error of [NewMiddleware] for a [Config] with neither
	// Consumer nor ConsumerByHandler, and by the error for a message that came through a
	// router handler ConsumerByHandler does not name (a renamed one, say) or through no router
	// handler. Such a message is nacked before any claim: it is never processed under a
	// consumer nobody named.
	ErrNoConsumer = errors.New("inbox: no consumer name")

	// ErrTxEndedByHandler is wrapped by the error a store's Commit or Rollback returns when
	// the handler committed or rolled back the inbox transaction itself, through its
	// driver's Commit or Rollback or with a statement (ROLLBACK, COMMIT, START TRANSACTION,
	// a MySQL statement that commits implicitly), and by a store's refusal of such a statement
	// before it is sent (package sqlinbox refuses it among queued statements and on a pgx
	// handler's pgx.Tx). The transaction belongs to the middleware; the message is nacked,
	// never acked, and its redelivery is either a duplicate (the handler's COMMIT was sent) or
	// processed again.
	ErrTxEndedByHandler = errors.New("inbox: the handler ended the inbox transaction itself")

	// ErrFingerprintMismatch is matched ([errors.Is]) by every *FingerprintMismatchError.
	ErrFingerprintMismatch = errors.New("inbox: duplicate key with a different payload")

	// ErrNoHandlerContext is wrapped by the error of [ExecAtCommit] and of [Publisher.Publish]
	// called with a context that carries no running inbox handler: one that does not come
	// from the inbox middleware (a message built in a handler without
	// msg.SetContext(handlerMsg.Context()), which would otherwise leave before the commit, and
	// also when the handler then fails), or one whose handler has returned (a goroutine the
	// handler left running), whose claim's transaction is over. Nothing is deferred or
	// published. Outside handlers, publish with [WithPublishNow].
	ErrNoHandlerContext = errors.New("inbox: no running inbox handler in the context")

	// ErrRecordTooLarge is wrapped by the error for a message whose handler returned or
	// published messages whose record (their UUIDs, metadata and payloads, encoded) is larger
	// than [Config.MaxRecorded]. It is found before anything of the record is sent to the
	// database: the claim's transaction rolls back (in write-behind mode nothing is sent), and
	// nothing of what the handler returned or published leaves the process. A store wraps it
	// too, in the error for a record its database refused for its size, after the fact
	// (package sqlinbox on MySQL, over max_allowed_packet): nothing was committed.
	//
	// It is an error of the message, not of the infrastructure, whatever the database did
	// with the request ([Poisonous] reports true, a store's IsTransient false): the handler
	// produces the same output for every redelivery, so retrying cannot help, and the poison
	// queue takes the message. What the team does about it: make the handler
	// produce less (publish a reference to a large payload stored elsewhere, not the payload
	// itself), or raise [Config.MaxRecorded], on MySQL with the server's max_allowed_packet
	// (docs/mysql.md), and send the message again from the poison queue.
	ErrRecordTooLarge = errors.New("inbox: the messages the handler produced are too large to record")

	// ErrNoPublisher is wrapped by the error for a duplicate whose committed run published
	// messages through a [Publisher] when this inbox knows no Publisher yet (set
	// [Config.Publisher]). The message is nacked, never acked without its messages.
	ErrNoPublisher = errors.New("inbox: recorded messages to publish again, but this inbox has no Publisher (set Config.Publisher)")
)

// FingerprintMismatchError reports a message whose key was processed before with a
// different payload: a producer that reuses IDs, or a key function that is not specific
// enough. What the middleware does with it is [Config.OnFingerprintMismatch].
type FingerprintMismatchError struct {
	Consumer string
	Key      string
	// Stored is the fingerprint of the payload processed first, nil if it was stored
	// without one; Received the new one's, never nil.
	Stored, Received []byte
}

func (e *FingerprintMismatchError) Error() string {
	stored := "none"
	if e.Stored != nil {
		stored = hex.EncodeToString(e.Stored)
	}
	return fmt.Sprintf("inbox: key %q of consumer %q was processed with payload fingerprint %s, this copy has %s",
		e.Key, e.Consumer, stored, hex.EncodeToString(e.Received))
}

// Is makes errors.Is(err, [ErrFingerprintMismatch]) true.
func (e *FingerprintMismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

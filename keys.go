package inbox

import (
	"crypto/sha256"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// UUIDKey is the default key function: the message's UUID, set once by its producer.
func UUIDKey(msg *message.Message) (string, error) { return msg.UUID, nil }

// KeyFromMetadata returns a key function that reads the key from the metadata field. Use it
// for a business key (an order number, a payment reference) when producers may send the same
// business event again under a new UUID. A message without the field fails with an error
// wrapping ErrEmptyKey.
func KeyFromMetadata(field string) func(*message.Message) (string, error) {
	return func(msg *message.Message) (string, error) {
		key := msg.Metadata.Get(field)
		if key == "" {
			return "", fmt.Errorf("%w: metadata field %q is not set", ErrEmptyKey, field)
		}
		return key, nil
	}
}

// PayloadSHA256 is the default fingerprint: the SHA-256 of the payload.
func PayloadSHA256(msg *message.Message) []byte {
	sum := sha256.Sum256(msg.Payload)
	return sum[:]
}

// MismatchPolicy is what the middleware does with a duplicate whose payload fingerprint
// differs from the one stored with the claim.
type MismatchPolicy int

const (
	// RejectMismatch, the default, returns a *FingerprintMismatchError, so the router nacks
	// the message and middleware.PoisonQueue can take it for a person to look at. It is the
	// default because acking would drop a payload that was never processed: a producer that
	// reuses an ID for a different event loses that event silently.
	RejectMismatch MismatchPolicy = iota
	// AckMismatch logs the *FingerprintMismatchError at error level and acks the message as
	// a duplicate. Choose it when producers legitimately re-serialise a payload differently
	// (a timestamp of sending inside it, say) and a key can be trusted alone.
	AckMismatch
)

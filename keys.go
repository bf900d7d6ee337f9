package inbox

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// claimOf decides what the message is claimed as: its consumer ([Config.Consumer], or
// ConsumerByHandler's for the router handler), its key ([Config.Key], checked
// against what every dialect can store) and its fingerprint. An error nacks the message;
// with a bad key, the claim still names its consumer, for the metrics of the failure.
func (c Config) claimOf(msg *message.Message, handler string) (Claim, error) {
	consumer, err := c.consumer(handler)
	if err != nil {
		return Claim{}, err
	}
	key, err := c.key(msg)
	if err != nil {
		return Claim{Consumer: consumer}, err
	}
	return Claim{Consumer: consumer, Key: key, Fingerprint: c.Fingerprint(msg)}, nil
}

func (c Config) key(msg *message.Message) (string, error) {
	key, err := c.Key(msg)
	if err != nil {
		return "", fmt.Errorf("inbox: key function for message %q: %w", msg.UUID, err)
	}
	if key == "" {
		return "", fmt.Errorf("%w: empty (message uuid %q)", ErrInvalidKey, msg.UUID)
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	if reason := invalidText(key); reason != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, reason)
	}
	return key, nil
}

// invalidText says why s cannot be a key or a consumer name, or "": not every dialect can
// store invalid UTF-8 or a NUL byte, and a control character (C0, DEL or C1) would reach log
// lines and terminals raw, where a newline forges a log line and an escape sequence drives the
// terminal (Watermill's loggers do not escape field values).
func invalidText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	for i, r := range s {
		if isControl(r) {
			return fmt.Sprintf("contains the control character %U at byte %d", r, i)
		}
	}
	return ""
}

// isControl reports the C0 controls, DEL and the C1 controls (U+0080 to U+009F).
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// UUIDKey is the default key function: the message's UUID, set once by its producer.
func UUIDKey(msg *message.Message) (string, error) { return msg.UUID, nil }

// KeyFromMetadata returns a key function that reads the key from the metadata field. Use it
// for a business key (an order number, a payment reference) when producers may send the same
// business event again under a new UUID. A message without the field fails with an error
// wrapping [ErrInvalidKey].
func KeyFromMetadata(field string) func(*message.Message) (string, error) {
	return func(msg *message.Message) (string, error) {
		key := msg.Metadata.Get(field)
		if key == "" {
			return "", fmt.Errorf("%w: empty: metadata field %q is not set", ErrInvalidKey, field)
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
	//
	// With a key the producer chooses ([KeyFromMetadata]: an order number), it lets whoever
	// sends a key first own it: a message that reuses another's business key, by mistake or on
	// purpose, is processed under it, and the real message is then acked without running,
	// with the first one's recorded messages published again in its name. Under [RejectMismatch]
	// the real message is nacked and shows; under [AckMismatch] only the error log shows it. Use
	// it with such keys only when every producer of the topic is trusted.
	AckMismatch
)

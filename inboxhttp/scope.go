package inboxhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// ScopedKey is the key the inbox claims a request under: the SHA-256, in hex, of the request's
// scope ([Config.Scope]) and its Idempotency-Key, each taken byte for byte and the scope
// prefixed by its length, so that two different pairs never give one key, and every claim key
// is 64 bytes, within [inbox.MaxKeyLength] whatever the scope's and the key's lengths.
//
// It is also what [inbox.KeyFromContext] returns to the handler: an idempotency key to pass on
// to other systems that is specific to the client. A broker handler that shares its consumer
// with the endpoint, so that a command sent both ways is one command, claims its messages
// under the same key:
//
//	inbox.Config{Consumer: "billing", Key: func(msg *message.Message) (string, error) {
//		return inboxhttp.ScopedKey(msg.Metadata.Get("customer"), msg.UUID), nil
//	}}
func ScopedKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(scope)) + ":" + scope))
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

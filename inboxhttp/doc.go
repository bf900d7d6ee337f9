// Package inboxhttp makes a net/http handler idempotent by the Idempotency-Key request header
// (the IETF draft "The Idempotency-Key HTTP Header Field"), with the same store, table and
// guarantees as the inbox middleware for Watermill messages: the key is claimed in the
// store's transaction, the handler writes its business change in that transaction
// (inbox.TxFromContext on the request's context, or inbox.ExecAtCommit), and its response is
// recorded in the same commit. A retry of a committed request gets the recorded response
// and the handler does not run again.
//
//	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
//	idempotent, err := inboxhttp.New(store, inboxhttp.Config{Consumer: "billing", Required: true}, logger)
//	mux.Handle("POST /orders", idempotent(http.HandlerFunc(createOrder)))
//
//	func createOrder(w http.ResponseWriter, r *http.Request) {
//		tx, ok := inbox.TxFromContext[pgx.Tx](r.Context())
//		...
//	}
//
// # What a client sees
//
//   - A new key: the handler runs; its response is held until the transaction commits and
//     then sent. A response with a status below 500 commits with the claim and is recorded:
//     its status, its body (up to Config.MaxRecordedBody) and the headers that describe it
//     (Content-Type, Location, ETag and the like, and Config.ReplayHeaders; never Date or
//     Set-Cookie). A 5xx response, a panic (answered 500) or a failed COMMIT (503 or 500)
//     rolls back and records nothing: the retry runs the handler again. Once COMMIT has
//     succeeded the client gets the committed response, also when publishing the messages
//     recorded with it fails afterwards: they stay recorded, and the failure is logged.
//   - A committed key: the recorded response, byte for byte, with Idempotent-Replayed: true.
//   - A key whose first request this process is still handling: 409 Conflict at once, with
//     Retry-After. In another process, the claim waits for the first request's transaction
//     (bounded by the store's sqlinbox.Config.LockTimeout) and then replays its response.
//   - The same key with another method, path or body (Config.Fingerprint): 422.
//   - A missing key where Config.Required is set, or a malformed one: 400.
//   - A database that is not available: 503 with Retry-After; nothing is recorded.
//
// Every error is an application/problem+json body (RFC 9457). The key is a Structured Field
// String (RFC 8941): Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324".
//
// # One store for broker messages and requests
//
// The claim is the inbox's: under a [Config.Consumer] that a broker handler shares, a command
// that arrives by HTTP with a key and again through the broker as a message of that UUID is
// processed once. A request whose key a broker message claimed first gets 204 No Content,
// marked replayed. Give the endpoint a consumer of its own where the two must stay apart.
//
// Keys live as long as the inbox's rows: a sqlinbox.RetentionRunner deletes them after its
// retention, which is the key's lifetime to publish to clients.
package inboxhttp

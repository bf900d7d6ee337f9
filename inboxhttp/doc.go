// Package inboxhttp makes a net/http handler idempotent by the Idempotency-Key request header
// (the IETF draft "The Idempotency-Key HTTP Header Field"), with the same store, table and
// guarantees as the inbox middleware for Watermill messages. A key is its client's: every
// endpoint names, in Config.Scope, whose key a request's is (the authenticated principal, the
// tenant, or the host where tenancy is by host), and a key is claimed under its scope, so that
// two clients that send the same key never share a claim, a response, or a 409. An endpoint
// without a Scope is refused; Unscoped, one key space for all clients, is for an endpoint whose
// clients are one party.
//
// The key is claimed in the store's transaction, the handler writes its business change in
// that transaction (inbox.TxFromContext on the request's context, or inbox.ExecAtCommit), and
// its response is recorded in the same commit. A retry of a committed request gets the
// recorded response and the handler does not run again.
//
//	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
//	idempotent, err := inboxhttp.NewMiddleware(store, inboxhttp.Config{
//		Consumer:   "billing",
//		Scope:      customerOf, // the authenticated customer: keys are per customer
//		RequireKey: true,
//	}, logger)
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
//     (Content-Type, Location, ETag, Cache-Control with its Vary, and the like, and
//     Config.ReplayHeaders; never Date or Set-Cookie). A 5xx response or a panic (answered
//     500) rolls back and records nothing: the retry runs the handler again. Once COMMIT has
//     succeeded the client gets the committed response, also when publishing the messages
//     recorded with it fails afterwards: they stay recorded, and the failure is logged.
//   - A committed key: the recorded response, byte for byte, with Idempotent-Replayed: true,
//     whatever other copies of it are doing.
//   - A key whose first request's claim this process holds open: 409 Conflict at once, with
//     Retry-After. In another process, the claim waits for the first request's transaction
//     (bounded by the store's sqlinbox.Config.LockTimeout) and then replays its response. In
//     write-behind mode, where the handler runs before its claim and cannot know whether the
//     key is committed, a copy waits for the first request and then gets its replay.
//   - The same key with another method, path, query string or body (Config.Fingerprint): 422.
//   - A missing key where Config.RequireKey is set, or a malformed one: 400.
//   - A request whose scope Config.Scope cannot tell: 403.
//   - A database that is not available, or a table the store refuses: 503 with Retry-After;
//     nothing is recorded. A COMMIT that failed: 503 or 500 saying that whether it was
//     recorded is not known, which the retry finds out.
//
// Every error is an application/problem+json body (RFC 9457). The key is a Structured Field
// String (RFC 8941): Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324".
//
// # One store for broker messages and requests
//
// The claim is the inbox's: under a [Config.Consumer] that a broker handler shares, a command
// that arrives by HTTP with a key and again through the broker as a message claimed under
// [ScopedKey] of the same scope and key is processed once. A request whose key a broker
// message claimed first gets 204 No Content, marked replayed. Give the endpoint a consumer of
// its own where the two must stay apart.
//
// Keys live as long as the inbox's rows: a sqlinbox.RetentionRunner deletes them after its
// retention, which is the key's lifetime to publish to clients.
package inboxhttp

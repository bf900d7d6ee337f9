// Package inbox makes a Watermill message handler an idempotent consumer: a message that is
// delivered twice (broker redelivery, consumer timeout, an outbox relay restarting) has the
// same durable effect as one delivered once.
//
// The picture in one minute: add the middleware [NewMiddleware] returns to a router, with a
// store from package sqlinbox (PostgreSQL, MySQL/MariaDB, SQLite). For every message it
// begins a transaction and inserts (consumer, message UUID) into an inbox table whose primary
// key is that pair. The handler writes its business rows through the same transaction
// ([TxFromContext]) and returns; the middleware commits, then the router acks. An error or a
// panic rolls back, releasing the claim, and the router nacks, so the redelivery runs the
// handler again. A copy whose key is committed already is acked without running the handler:
//
//	store, err := sqlinbox.NewPgx(pool, sqlinbox.Config{})
//	inboxMiddleware, err := inbox.NewMiddleware(store, inbox.Config{Consumer: "billing"}, logger)
//	router.AddMiddleware(poisonQueue, retry.Middleware, middleware.Recoverer,
//		inboxMiddleware, middleware.Timeout(10*time.Second), middleware.CorrelationID)
//
//	func createInvoice(msg *message.Message) error {
//		tx, ok := inbox.TxFromContext[pgx.Tx](msg.Context())
//		if !ok {
//			return errors.New("no inbox transaction")
//		}
//		_, err := tx.Exec(msg.Context(), "INSERT INTO invoices (order_id) VALUES ($1)", string(msg.Payload))
//		return err
//	}
//
// The Example below runs this path against PostgreSQL. The README has a complete program,
// and docs/ in the repository has the guarantees, each with its test.
//
// # The pattern
//
// [NewMiddleware] returns a router middleware. For every message it begins a database
// transaction and claims (consumer, key) in the inbox table, whose primary key is exactly
// that pair, with an insert that skips a conflict. The handler receives the same
// transaction through the message context ([TxFromContext]) and writes its business change
// in it:
//
//   - the claim is new: the handler runs; on success the transaction commits and the router
//     acks; on an error or a panic it rolls back, which releases the claim, and the router
//     nacks, so the redelivery runs the handler again;
//   - the claim hits the key: the message was processed before; the handler is skipped and
//     the message is acked.
//
// The database's primary key is the only duplicate check. There is no "select, then insert"
// step that two copies arriving at once could both pass: the second copy's insert waits for
// the first copy's transaction and then either finds the key (first committed) or takes it
// (first rolled back).
//
// The middleware touches only the message and the router, so it works with every Watermill
// Pub/Sub unchanged. Stores for PostgreSQL (pgx v5 or database/sql), MySQL/MariaDB and
// SQLite are in the sqlinbox package.
//
// # Consumers
//
// [Config.Consumer] names whose effects a claim guards, and has no default. Handlers that
// compete for the messages of one queue or consumer group (several router handlers on one
// RabbitMQ queue, several processes in one Kafka, NATS or Redis Streams group) share one
// consumer, so that a copy reaching any of them is recognised. Handlers that each must see
// every message (fan-out, each on its own queue) need a consumer each: one middleware per
// handler, or [Config.ConsumerByHandler], a map written out. Nothing the middleware
// sees tells the two apart: the router handler's name would run a copy again on every
// competing handler, the topic would ack all but one fan-out handler's messages unprocessed.
//
// # Guarantees
//
// For every consumer, each key's database effects written through the inbox transaction
// commit at most once, and a message is acked only after they committed or after its key was
// found committed. An error anywhere (claim, handler, commit, lost connection, invalid key,
// missing consumer name) is returned to the router, which nacks; nothing is acked silently.
// The guarantee rests on the inbox table's primary key: the stores in sqlinbox read the
// table's shape from the catalog before their first claim and refuse a table that cannot
// guard (sqlinbox.ErrTableMismatch), failing every message before anything is processed.
//
// # Out of scope
//
// Effects outside the database cannot be rolled back with the transaction: an email sent or
// an HTTP call made by a handler whose transaction then fails will be made again on the
// redelivery. Pass [KeyFromContext] on as the idempotency key of such calls (payment
// providers and most email APIs accept one).
//
// # Handlers that publish
//
// The router publishes the messages a handler returns after the middleware has committed;
// if that publish fails, the redelivery is a duplicate. So the middleware records those
// messages with the claim and returns them again for every duplicate: the router publishes
// them again with their original UUIDs, and consumers downstream deduplicate them. They are
// published at least once, never lost.
//
// A handler that publishes itself (components/cqrs buses, a publisher called from the
// handler) does so through a [Publisher]: inside an inbox handler it records the messages
// with the claim instead of publishing them, and the middleware publishes them after the
// commit, and again for every duplicate. A handler that fails after publishing sends
// nothing. A message must carry the handler's context (cqrs buses pass it on; a handler
// that builds a message calls msg.SetContext(handlerMsg.Context())): a Publisher refuses
// one without ([ErrNoHandlerContext]), and publishes at once only under [WithPublishNow], for code
// that is not a handler.
//
// # The two modes
//
// By default the claim comes first: BEGIN and the claim, then the handler in the claim's
// transaction, then COMMIT. The documentation calls this the claim-first mode. In
// write-behind mode ([Config.WriteBehind]) the handler runs before the claim and only queues
// its writes ([ExecAtCommit]); the claim, those writes and COMMIT then go together, and a
// duplicate's handler run is discarded. Its documentation says when to use it.
//
// # Observability
//
// OpenTelemetry metrics ([Config.MeterProvider]) and spans ([Config.TracerProvider]), both
// defaulting to the global providers; package inboxotel names them.
//
// # Keys and fingerprints
//
// The key is msg.UUID unless [Config.Key] says otherwise ([KeyFromMetadata] for a business
// key). Each claim stores a payload fingerprint; a duplicate key with a different payload is
// a *FingerprintMismatchError, handled as [Config.OnFingerprintMismatch] says.
//
// # Middleware order
//
// Add the inbox inside middleware.Retry and middleware.PoisonQueue, with Recoverer between
// Retry and the inbox, and middleware.Timeout inside the inbox, as above:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(publisher, "orders_poison", inbox.Poisonous)
//	...
//	retry := middleware.Retry{MaxRetries: math.MaxInt32, InitialInterval: 50 * time.Millisecond,
//		Multiplier: 1.5, MaxInterval: 2 * time.Second, ShouldRetry: inbox.ShouldRetry(3, logger), Logger: logger}
//	router.AddMiddleware(poisonQueue, retry.Middleware, middleware.Recoverer,
//		inboxMiddleware, middleware.Timeout(10*time.Second), middleware.CorrelationID)
//
// so that every retry runs in a fresh transaction (with Retry inside, a failed attempt's
// writes would commit together with the retry's), a panic is retried, and a message that
// cannot be claimed, such as one without a UUID, ends in the poison queue instead of being
// redelivered for ever. [Poisonous] and [ShouldRetry] tell the message's own failure, which goes
// to the poison queue after 3 retries, from the infrastructure's (the database away, the
// table refused, a deadlock), which is retried with a backoff of up to 2 s for as long as it
// lasts, with no connection held between attempts. Call the store's CheckTable before
// router.Run, so that a service on a table that cannot guard refuses to start. Timeout goes inside because it leaves its cancelled context on the
// message, which the inbox replaces with the one it received: outside, every retry would fail
// at once and PoisonQueue's publish would fail on publishers that honour the message context.
// Do not combine the inbox with middleware.Deduplicator: it loses messages whose handler
// failed, on either side of the inbox.
package inbox

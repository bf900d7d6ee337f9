package inbox

import "context"

// Store opens the transaction in which a message is claimed. The stores in the sqlinbox
// package implement it for pgx and database/sql; a Store of your own must keep the same
// promise: the claim is an insert into a table whose primary key is (consumer, key), and a
// conflict on that key is the only thing that makes a claim a duplicate. Run the
// conformance suite in package inboxtest on it.
//
// Two capabilities are optional, each found by a type assertion: [WriteBehindStore], and a
// method IsTransient(err error) bool, which tells a failure of the store's database (its
// connection lost, a deadlock, a read-only server) from the message's own, so that
// [Poisonous] never poisons a healthy message over an outage. A store without it has every
// failure judged the message's, retried a bounded number of times. A [Tx] may have the
// same method, for the handler's errors (see Tx). It has no interface type of its own: one
// method that a store's own error vocabulary backs is documented here rather than named.
type Store interface {
	// Claim begins a transaction and inserts the claim in it, skipping a conflict on
	// (consumer, key).
	//
	// A new claim returns the open transaction: the caller runs the handler and must then
	// Commit or Rollback it. A duplicate, whose key a committed row already holds, returns
	// what that row recorded in prior, with the transaction already ended and tx nil. A copy
	// of the key that another transaction holds but has not committed makes [Claim] wait for
	// that transaction: its commit makes this claim a duplicate, its rollback makes it new.
	// An error leaves no transaction open.
	Claim(ctx context.Context, claim Claim) (tx Tx, prior *Record, err error)
}

// Claim is one message's claim.
type Claim struct {
	Consumer string
	Key      string
	// Fingerprint identifies the payload (see [Config.Fingerprint]); nil records none.
	Fingerprint []byte
}

// Record is what the delivery that committed a key recorded.
type Record struct {
	// Fingerprint is the payload fingerprint stored with the claim; nil if none was.
	Fingerprint []byte
	// Produced holds the messages the handler returned or published through a [Publisher],
	// as encoded by the middleware; nil if there were none.
	Produced []byte
	// Published is set by a store that knows every message of Produced has been published
	// since (see [PublishedMarker]): the duplicate then publishes none of them again. A store
	// that does not know leaves it false, and the middleware publishes them again, as it
	// would for a record whose publish failed.
	Published bool
}

// PublishedMarker is implemented by a [Store] that keeps, with each record, whether its
// messages have left, so that a relay publishes the records whose publish failed and a
// duplicate or a replay does not publish again what has left (sqlinbox.Store, on a table
// with the unpublished column). The middleware calls MarkPublished once every message of a
// committed record has been published: those sent through a [Publisher] after the commit,
// those it returned once the router acked the message, which it does after publishing them.
//
// MarkPublished must not block the delivery: a store writes its marks later, several in one
// statement. A mark that is lost (a crash before it is written) only means the record's
// messages are published once more, under the same UUIDs, never that one is missing.
type PublishedMarker interface {
	MarkPublished(claim Claim)
}

// Tx is a transaction opened by [Store.Claim].
//
// The middleware calls exactly one of Commit and Rollback, once, after the handler returns,
// and nothing after it. Each of them ends the transaction whatever it returns: when either
// returns, with or without an error, the transaction holds no lock and no connection, and
// the claim is committed or released (a COMMIT whose reply was lost may have done either;
// the next delivery finds out which, as a duplicate or as a new claim). A Commit that
// fails before COMMIT is sent rolls back. The conformance suite in package inboxtest checks
// this contract on a real database.
//
// A Tx may also have a method IsTransient(err error) bool, which the middleware calls after
// Rollback with the error the handler returned: true when that error is a failure of the
// store's own database on this transaction (the session's connection lost, a deadlock or lock
// timeout the database raised on it), false for anything else the handler returns, so that
// [Poisonous] reports a handler's failure by where it happened (sqlinbox's transactions have
// one). Without it, the middleware asks the store's IsTransient method, if it has one.
type Tx interface {
	// Handle returns what handlers write through: the driver's transaction (pgx.Tx,
	// *sql.Tx) or the data layer's over it; [TxFromContext] hands it out. It is valid until
	// Commit or Rollback.
	Handle() any
	// ExecAtCommit adds a statement to run when the transaction commits, after the ones
	// added before it and before the record of produced messages and COMMIT (see
	// ExecAtCommit, the function). It is safe for concurrent use.
	ExecAtCommit(sql string, args ...any)
	// Commit runs the statements added with [ExecAtCommit], stores produced (nil: nothing)
	// with the claim and commits, making the claim and everything written through Handle
	// durable together. A transaction the handler ended itself gives an error wrapping
	// [ErrTxEndedByHandler]. Commit ends the transaction even when it fails.
	Commit(ctx context.Context, produced []byte) error
	// Rollback releases the claim and discards everything written through Handle. It ends
	// the transaction even when it fails.
	Rollback(ctx context.Context) error
}

// WriteBehindStore is implemented by a [Store] that can claim, write and commit in one step,
// for [Config.WriteBehind]. sqlinbox.Store sends it all as one pipelined batch on pgx, and as
// one multi-statement request on MySQL with sqlinbox.NewMultiStatement: one round trip. The
// middleware uses [Claim] and Commit, in the same order, with a Store that does not implement
// it.
type WriteBehindStore interface {
	// ClaimAndCommit begins a transaction, inserts the claim with produced recorded, runs
	// statements in order and commits. If a committed row holds (consumer, key) already, it
	// writes nothing and returns what that row recorded in prior. Only a conflict of the
	// claim itself on the inbox's primary key makes a duplicate: a unique violation of one of
	// statements is an error. (A store that cannot tell which statement failed may return
	// prior for a statement's violation only if a committed row holds the key by the time it
	// reads it: a copy committed since, so the message is a duplicate after all.) A copy of the key that another transaction holds makes it wait
	// for that transaction, as [Claim] does. On an error nothing is committed, unless the error
	// came from COMMIT itself, whose outcome the next delivery finds out.
	ClaimAndCommit(ctx context.Context, claim Claim, statements []Statement, produced []byte) (prior *Record, err error)
}

package inbox

// The inbox table holds one row per message a consumer has processed:
//
//	consumer      the consumer (inbox partition) that processed the message
//	message_id    the message's idempotency key (msg.UUID by default)
//	processed_at  when the claim was made, for retention
//	payload_hash  the payload's fingerprint (SHA-256 by default), to catch reused keys
//	produced      the messages the handler returned or published through a Publisher, to
//	              publish again on a redelivery
//	PRIMARY KEY (consumer, message_id)
//
// The primary key is the guard against duplicates: the claim is an insert that a conflict
// on it turns into a duplicate, so two copies of a message can never both be claimed,
// however they race. The SQL that creates the table, per database, is in package sqlinbox
// (sqlinbox.SchemaSQL).
//
// The column names are fixed: the stores' statements, the table check, the command-line
// tool and the conformance suite all name them, whatever the dialect.
const (
	// MaxConsumerLength is the longest consumer name, in bytes, that the table holds.
	MaxConsumerLength = 255
	// MaxKeyLength is the longest idempotency key, in bytes, that the table holds.
	MaxKeyLength = 255
)

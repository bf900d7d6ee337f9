package inbox

import "context"

// Store opens the transaction in which a message is claimed. The stores in the sqlinbox
// package implement it for pgx and database/sql; a Store of your own must keep the same
// promise: the claim is an insert into a table whose primary key is (consumer, key), and a
// conflict on that key is the only thing that makes claimed false.
type Store interface {
	// Claim begins a transaction and inserts (consumer, key) in it, skipping a conflict.
	//
	// claimed is true when the row was inserted: the caller runs the handler and must then
	// Commit or Rollback tx. claimed is false when a committed row already holds the key:
	// Claim has ended the transaction itself and tx is nil. A copy of the key that another
	// transaction has claimed but not yet committed makes Claim wait for that transaction.
	Claim(ctx context.Context, consumer, key string) (tx Tx, claimed bool, err error)
}

// Tx is a transaction opened by Store.Claim.
type Tx interface {
	// Driver returns the driver's transaction (pgx.Tx, *sql.Tx) that handlers write
	// through; TxFromContext hands it out.
	Driver() any
	// Commit makes the claim and everything written through Driver durable together.
	Commit(ctx context.Context) error
	// Rollback releases the claim and discards everything written through Driver.
	Rollback(ctx context.Context) error
}

package invoicedb

// Written by hand, not by sqlc: sqlc keeps each query's text in an unexported constant, so
// only a file of this package can queue it (inbox.ExecAtCommit) for write-behind mode.

import (
	"context"

	inbox "github.com/inboxkit/watermill-inbox"
)

// QueueRecordInvoice queues RecordInvoice with inbox.ExecAtCommit, to run when the inbox
// transaction of ctx commits; its RETURNING id is not read.
func QueueRecordInvoice(ctx context.Context, arg RecordInvoiceParams) error {
	return inbox.ExecAtCommit(ctx, recordInvoice, arg.OrderID, arg.AmountCents)
}

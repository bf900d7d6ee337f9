package entrepo_test

import (
	"context"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	inbox "github.com/inboxkit/watermill-inbox"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb/invoice"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb/line"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/internal/layertest"
	"github.com/inboxkit/watermill-inbox/handlertest"
	"github.com/inboxkit/watermill-inbox/sqlinbox"
)

// invoiceRow and lineRow are the rows ent writes, as the kit compares them: no IDs, which
// differ between two runs of one delivery; a line names its invoice by order ID ("" for a
// line without one).
type (
	invoiceRow struct {
		OrderID     string
		AmountCents int64
	}
	lineRow struct {
		Description    string
		AmountCents    int64
		InvoiceOrderID string
	}
)

// books is what the handler changes.
type books struct {
	Invoices []invoiceRow
	Lines    []lineRow
}

// TestHandler runs Handle through the kit on PostgreSQL: copies one after another and at
// once, a failure at each of its statements (the line's INSERT, and the savepoint in which
// ent creates the invoice with its edge), at COMMIT and after it returned. The *sql.DB under
// the store and the application's client is opened through the kit, so that it sees what
// ent sends on the inbox transaction through inboxent's driver.
//
// Claim-first mode only: write-behind mode queues SQL text with inbox.ExecAtCommit, and ent renders
// none without running it (its builders execute through the driver).
func TestHandler(t *testing.T) {
	ctx := context.Background()
	sqlDB, err := handlertest.OpenDB("pgx", layertest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	client := entdb.NewClient(entdb.Driver(entsql.OpenDB(dialect.Postgres, sqlDB))) // the application's, on the pool
	if err := client.Schema.Create(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := sqlinbox.NewDB(sqlDB, sqlinbox.Postgres{}, sqlinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InitializeSchema(ctx); err != nil {
		t.Fatal(err)
	}
	handlertest.Run(t.Context(), t, handlertest.Case{
		Handler:  layertest.KitHandler(entrepo.Handle),
		Store:    store,
		Config:   inbox.Config{Consumer: "billing"},
		Message:  layertest.OrderMessage(t),
		Snapshot: func(ctx context.Context) (any, error) { return readBooks(ctx, client) },
		Reset: func(ctx context.Context) error {
			if _, err := client.Line.Delete().Exec(ctx); err != nil {
				return err
			}
			_, err := client.Invoice.Delete().Exec(ctx)
			return err
		},
	}, nil)
}

// readBooks reads every invoice and every line with client, ordered.
func readBooks(ctx context.Context, client *entdb.Client) (books, error) {
	var b books
	invoices, err := client.Invoice.Query().Order(invoice.ByOrderID(), invoice.ByAmountCents()).All(ctx)
	if err != nil {
		return b, err
	}
	for _, i := range invoices {
		b.Invoices = append(b.Invoices, invoiceRow{OrderID: i.OrderID, AmountCents: i.AmountCents})
	}
	lines, err := client.Line.Query().WithInvoice().Order(line.ByDescription(), line.ByAmountCents()).All(ctx)
	if err != nil {
		return b, err
	}
	for _, l := range lines {
		row := lineRow{Description: l.Description, AmountCents: l.AmountCents}
		if l.Edges.Invoice != nil {
			row.InvoiceOrderID = l.Edges.Invoice.OrderID
		}
		b.Lines = append(b.Lines, row)
	}
	return b, nil
}

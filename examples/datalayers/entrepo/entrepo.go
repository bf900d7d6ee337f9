// Package entrepo is a billing handler whose repository is an ent client (generated into
// entdb from schema). The client of each message is built on inboxent.Driver, a driver on
// the inbox transaction, so the invoice and its lines commit or roll back with the claim.
//
// After changing the schema, regenerate from the repository root with
// go generate ./examples/datalayers/entrepo/; TestGeneratedCodeIsCurrent fails until then.
package entrepo

import (
	"context"
	"errors"
	"fmt"

	"entgo.io/ent/dialect"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/inboxkit/watermill-inbox/contrib/inboxent"
	"github.com/inboxkit/watermill-inbox/examples/billing"
	"github.com/inboxkit/watermill-inbox/examples/datalayers/entrepo/entdb"
)

// Record is the repository method: it writes order's invoice with one line. Creating an
// invoice with an edge makes ent run it in a transaction of its own: on inboxent's driver, a
// savepoint.
func Record(ctx context.Context, client *entdb.Client, order billing.OrderPlaced) error {
	line, err := client.Line.Create().SetDescription("order " + order.OrderID).SetAmountCents(order.AmountCents).Save(ctx)
	if err != nil {
		return fmt.Errorf("entrepo: record line for order %q: %w", order.OrderID, err)
	}
	if err := client.Invoice.Create().SetOrderID(order.OrderID).SetAmountCents(order.AmountCents).AddLines(line).Exec(ctx); err != nil {
		return fmt.Errorf("entrepo: record invoice for order %q: %w", order.OrderID, err)
	}
	return nil
}

// Handle is the inbox handler for a PostgreSQL store.
func Handle(msg *message.Message) error {
	order, err := billing.DecodeOrder(msg)
	if err != nil {
		return err
	}
	client, ok := Client(msg.Context())
	if !ok {
		return errors.New("entrepo: no database/sql inbox transaction in the message context")
	}
	return Record(msg.Context(), client, order)
}

// Client returns an ent client on the inbox transaction in ctx (PostgreSQL).
func Client(ctx context.Context) (*entdb.Client, bool) {
	drv, ok := inboxent.Driver(ctx, dialect.Postgres)
	if !ok {
		return nil, false
	}
	return entdb.NewClient(entdb.Driver(drv)), true
}

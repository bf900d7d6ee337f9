// Package schema is the ent schema of the entrepo example: an invoice and its lines.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
)

// Invoice is one invoice per order. No unique index on order_id, on purpose: the inbox is
// what stops a second invoice.
type Invoice struct{ ent.Schema }

// Fields of Invoice.
func (Invoice) Fields() []ent.Field {
	return []ent.Field{
		field.String("order_id").NotEmpty(),
		field.Int64("amount_cents"),
	}
}

// Edges of Invoice: creating an invoice with its lines makes ent open a transaction.
func (Invoice) Edges() []ent.Edge {
	return []ent.Edge{edge.To("lines", Line.Type)}
}

// Line is a line of an invoice.
type Line struct{ ent.Schema }

// Fields of Line.
func (Line) Fields() []ent.Field {
	return []ent.Field{
		field.String("description"),
		field.Int64("amount_cents"),
	}
}

// Edges of Line.
func (Line) Edges() []ent.Edge {
	return []ent.Edge{edge.From("invoice", Invoice.Type).Ref("lines").Unique()}
}

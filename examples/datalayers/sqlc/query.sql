-- name: RecordInvoice :one
INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2) RETURNING id;

-- name: CountInvoices :one
SELECT count(*) FROM invoices WHERE order_id = $1;

-- name: RecordInvoices :copyfrom
INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2);

-- name: AddToInvoice :batchexec
UPDATE invoices SET amount_cents = amount_cents + $2 WHERE order_id = $1;

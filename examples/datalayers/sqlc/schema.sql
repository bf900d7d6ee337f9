-- No UNIQUE on order_id, on purpose: the inbox is what stops a second invoice.
CREATE TABLE invoices (
	id bigserial PRIMARY KEY,
	order_id text NOT NULL,
	amount_cents bigint NOT NULL
);

DO $$ BEGIN
	IF to_regnamespace('"app"') IS NULL THEN
		CREATE SCHEMA "app";
	END IF;
EXCEPTION WHEN duplicate_schema THEN NULL;
END $$;
CREATE TABLE IF NOT EXISTS "app"."billing_inbox" (
	consumer     varchar(255) COLLATE "C" NOT NULL,
	message_id   varchar(255) COLLATE "C" NOT NULL,
	processed_at timestamptz NOT NULL DEFAULT now(),
	payload_hash bytea,
	produced     bytea,
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS "billing_inbox_processed_at" ON "app"."billing_inbox" (processed_at);

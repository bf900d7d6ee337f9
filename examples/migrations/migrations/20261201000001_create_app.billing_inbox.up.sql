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
	unpublished  boolean NOT NULL DEFAULT false,
	PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS "billing_inbox_processed_at" ON "app"."billing_inbox" (processed_at);
DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('"app"."billing_inbox"') AND attname = 'unpublished' AND NOT attisdropped) THEN CREATE INDEX IF NOT EXISTS "billing_inbox_unpublished" ON "app"."billing_inbox" (processed_at) WHERE unpublished; END IF; END $$;

DROP TABLE IF EXISTS "app"."billing_inbox";

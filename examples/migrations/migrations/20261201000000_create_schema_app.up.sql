-- The team's own migration, before the inbox's: the schema its tables live in.
CREATE SCHEMA IF NOT EXISTS app;

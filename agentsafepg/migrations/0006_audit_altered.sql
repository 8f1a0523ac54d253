-- agentsafe 0006: audit rows say which of their fields the sink altered to
-- store them (agentsafepg.AuditSink).
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction, after
-- 0002.
--
-- An event may carry what a text column cannot hold (a NUL byte, bytes that
-- are not UTF-8) or more than a row should (a huge error): the sink escapes
-- or cuts such a field and lists it here as 'field:escaped' or
-- 'field:truncated' ('at:clamped' for a time PostgreSQL cannot represent).
-- NULL means every field is stored exactly as the engine produced it.

ALTER TABLE agentsafe.audit_events ADD COLUMN IF NOT EXISTS altered text[];

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (6, 'audit_altered') ON CONFLICT (version) DO NOTHING;

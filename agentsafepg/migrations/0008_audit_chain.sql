-- agentsafe 0008: the audit trail's hash chains (SPEC §15).
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction, after
-- 0002.
--
-- Each agentsafepg.AuditSink writes one chain: chain is its id, chain_seq
-- 1, 2, 3 … without gaps, prev the hash of the chain's previous record (64
-- zeros before the first), hash the SHA-256 of "agentsafe/audit/v1", prev
-- and the RFC 8785 form of the row's fields as stored (every column but seq,
-- recorded_at, hash and signature). seq, the identity, stays the order rows
-- were inserted in, which the verifier holds each chain to. Rows written
-- before this migration have no chain.
--
-- A checkpoint row (type 'audit.checkpoint') attests its chain through
-- itself: it has chain, chain_seq, prev, hash, at and, when the sink signs,
-- signature (Ed25519 over "agentsafe/audit/checkpoint/v1", chain,
-- chain_seq as 8 bytes big-endian, hash and at in RFC 3339); it has no
-- execution or procedure.

ALTER TABLE agentsafe.audit_events
	ADD COLUMN IF NOT EXISTS chain     text,
	ADD COLUMN IF NOT EXISTS chain_seq bigint,
	ADD COLUMN IF NOT EXISTS prev      text,
	ADD COLUMN IF NOT EXISTS hash      text,
	ADD COLUMN IF NOT EXISTS signature bytea,
	ALTER COLUMN execution_id DROP NOT NULL,
	ALTER COLUMN procedure DROP NOT NULL;

-- One record per place in a chain: a writer that lost a commit's reply
-- learns from a conflict here that the write was committed. It also
-- serves a chain's head and the verifier's walk of each chain.
CREATE UNIQUE INDEX IF NOT EXISTS audit_events_chain ON agentsafe.audit_events (chain, chain_seq);

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (8, 'audit_chain') ON CONFLICT (version) DO NOTHING;

-- agentsafe 0002: the strict audit trail (agentsafepg.AuditSink).
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction, after
-- 0001.
--
-- One row per event, and no payload, ever: ids, the input digest (keyed when
-- the engine has a digest key), codes, counts and the approver's comment.
-- Fields an event type does not use are NULL.

CREATE TABLE IF NOT EXISTS agentsafe.audit_events (
	seq                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	type                text NOT NULL,
	at                  timestamptz NOT NULL,           -- the engine's clock
	recorded_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
	execution_id        text NOT NULL,
	procedure           text NOT NULL,
	actor_id            text,
	actor_tenant        text,
	input_digest        text,
	side_effect         text,
	risk                text,
	attempt             integer,
	attempts            integer,
	previous_error_code text,
	code                text,
	retryable           boolean,
	duration            interval,
	approval_id         text,
	approver_id         text,
	approver_tenant     text,
	comment             text,
	reason              text,
	succeeded           boolean,
	error               text,
	stack               text,
	replay_of           text
);

-- All events of an execution, in the order they were recorded.
CREATE INDEX IF NOT EXISTS audit_events_execution ON agentsafe.audit_events (execution_id, seq);
-- All executions of an actor: every execution's trail starts with one
-- capability.requested event.
CREATE INDEX IF NOT EXISTS audit_events_actor ON agentsafe.audit_events (actor_tenant, actor_id, at)
	INCLUDE (execution_id) WHERE type = 'capability.requested';

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (2, 'audit') ON CONFLICT (version) DO NOTHING;

-- agentsafe 0001: approvals.
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- Every decision about time uses the database clock (clock_timestamp());
-- the skew parameters are zero outside agentsafe's own tests.

CREATE SCHEMA IF NOT EXISTS agentsafe;

CREATE TABLE IF NOT EXISTS agentsafe.schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per approval record. status is the stored status; a pending or
-- approved record past expires_at reads expired, a consumed one past its
-- lease (consumed_at + lease) reads in_doubt (agentsafe.approval_status).
-- Status and consumer live in one row, so one conditional UPDATE checks and
-- writes.
CREATE TABLE IF NOT EXISTS agentsafe.approvals (
	id                     text PRIMARY KEY,
	audience               text NOT NULL,
	procedure              text NOT NULL,
	approval_type          text NOT NULL,
	quorum                 integer NOT NULL,
	requester_id           text NOT NULL,
	requester_tenant       text NOT NULL,
	requester_kind         text NOT NULL,
	requester_on_behalf_of text[] NOT NULL,
	requested_by           text NOT NULL,
	digest                 text NOT NULL,
	-- binding is what Consume compares, in one column: a SHA-256 over
	-- audience, the whole requester, procedure, approval type, quorum and
	-- digest, made by the store (the columns above keep each of them, to
	-- name a mismatch).
	binding                text NOT NULL,
	view_text              text NOT NULL,
	reasons                text[] NOT NULL,
	side_effect            text NOT NULL,
	risk                   text NOT NULL,
	expires_in             interval NOT NULL,
	payload                bytea,
	status                 text NOT NULL,
	requested_at           timestamptz NOT NULL,
	expires_at             timestamptz NOT NULL,
	-- Votes, oldest first: [{"id","tenant","kind","obo":[…],"approve","comment","at"(µs)}].
	votes                  jsonb NOT NULL DEFAULT '[]',
	approver_id            text NOT NULL DEFAULT '',
	approver_tenant        text NOT NULL DEFAULT '',
	approver_kind          text NOT NULL DEFAULT '',
	approver_on_behalf_of  text[] NOT NULL DEFAULT '{}',
	comment                text NOT NULL DEFAULT '',
	decided_at             timestamptz,
	consumed_by            text NOT NULL DEFAULT '',
	consumed_at            timestamptz,
	lease                  interval,
	outcome_status         text NOT NULL DEFAULT '',
	outcome_code           text NOT NULL DEFAULT '',
	outcome_late           boolean NOT NULL DEFAULT false,
	outcome_at             timestamptz,
	-- Retention: how long the record is kept after it stopped mattering,
	-- and when that is (garbage collection, never a decision).
	retention              interval NOT NULL,
	retain_until           timestamptz NOT NULL
);

-- List: one audience and tenant, oldest request first.
CREATE INDEX IF NOT EXISTS approvals_list ON agentsafe.approvals (audience, requester_tenant, requested_at, id);
-- Create: a requester's pending records (the repeat and the cap).
CREATE INDEX IF NOT EXISTS approvals_pending ON agentsafe.approvals (audience, requester_tenant, requester_id) WHERE status = 'pending';
-- Garbage collection.
CREATE INDEX IF NOT EXISTS approvals_retain_until ON agentsafe.approvals (retain_until);

-- approval_status is a record's status as of at.
CREATE OR REPLACE FUNCTION agentsafe.approval_status(status text, expires_at timestamptz, lease_until timestamptz, at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT CASE
		WHEN status IN ('pending', 'approved') AND at >= expires_at THEN 'expired'
		WHEN status = 'consumed' AND at >= lease_until THEN 'in_doubt'
		ELSE status
	END
$$;

-- approval_create creates a pending record, in one step under a lock on
-- the requester (audience, tenant, id): while a pending, unexpired record
-- of the same call by the same whole requester exists, it returns that
-- record instead; a requester at max_pending pending records gets no row.
-- It also forgets up to 100 records past their retention.
CREATE OR REPLACE FUNCTION agentsafe.approval_create(
	p_id text, p_audience text, p_procedure text, p_type text, p_quorum integer,
	p_requester_id text, p_requester_tenant text, p_requester_kind text, p_requester_on_behalf_of text[],
	p_requested_by text, p_digest text, p_binding text, p_view text, p_reasons text[], p_side_effect text, p_risk text,
	p_expires_in interval, p_payload bytea, p_max_pending integer, p_retention interval, p_skew interval)
RETURNS SETOF agentsafe.approvals LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	pending integer := 0;
	r agentsafe.approvals;
BEGIN
	PERFORM pg_advisory_xact_lock(hashtextextended(p_audience || E'\n' || p_requester_tenant || E'\n' || p_requester_id, 7));
	DELETE FROM agentsafe.approvals WHERE id IN (
		SELECT id FROM agentsafe.approvals WHERE retain_until < t ORDER BY retain_until LIMIT 100 FOR UPDATE SKIP LOCKED);
	FOR r IN
		SELECT * FROM agentsafe.approvals
		WHERE audience = p_audience AND requester_tenant = p_requester_tenant AND requester_id = p_requester_id
			AND status = 'pending' AND expires_at > t
	LOOP
		IF r.requester_kind = p_requester_kind AND r.requester_on_behalf_of = p_requester_on_behalf_of
			AND r.procedure = p_procedure AND r.digest = p_digest THEN
			RETURN NEXT r; -- the same call asked again: the same approval
			RETURN;
		END IF;
		pending := pending + 1;
	END LOOP;
	IF pending >= p_max_pending THEN
		RETURN;
	END IF;
	RETURN QUERY INSERT INTO agentsafe.approvals (
		id, audience, procedure, approval_type, quorum,
		requester_id, requester_tenant, requester_kind, requester_on_behalf_of,
		requested_by, digest, binding, view_text, reasons, side_effect, risk, expires_in, payload,
		status, requested_at, expires_at, retention, retain_until)
	VALUES (
		p_id, p_audience, p_procedure, p_type, p_quorum,
		p_requester_id, p_requester_tenant, p_requester_kind, p_requester_on_behalf_of,
		p_requested_by, p_digest, p_binding, p_view, p_reasons, p_side_effect, p_risk, p_expires_in, p_payload,
		'pending', t, t + p_expires_in, p_retention, t + p_expires_in + p_retention)
	RETURNING *;
END
$$;

-- approval_vote records one vote on a pending, unexpired record of
-- p_audience, under the record's row lock: it returns the record after the
-- vote, or no row when the vote is refused (a repeat, a record no longer
-- pending or expired, or a voter who is not distinct from an earlier one:
-- the same id, or either's id in the other's delegation chain). A
-- rejection rejects; the record is approved at the quorum's vote.
CREATE OR REPLACE FUNCTION agentsafe.approval_vote(
	p_id text, p_audience text, p_approve boolean,
	p_approver_id text, p_approver_tenant text, p_approver_kind text, p_approver_on_behalf_of text[],
	p_comment text, p_skew interval)
RETURNS SETOF agentsafe.approvals LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	r agentsafe.approvals;
	decided boolean;
BEGIN
	SELECT * INTO r FROM agentsafe.approvals WHERE id = p_id FOR UPDATE;
	IF NOT FOUND OR r.audience <> p_audience OR r.status <> 'pending' OR t >= r.expires_at THEN
		RETURN;
	END IF;
	IF EXISTS (SELECT 1 FROM jsonb_array_elements(r.votes) v
		WHERE v->>'id' = p_approver_id OR (v->'obo') ? p_approver_id OR v->>'id' = ANY (p_approver_on_behalf_of)) THEN
		RETURN;
	END IF;
	decided := NOT p_approve OR jsonb_array_length(r.votes) + 1 >= greatest(r.quorum, 1);
	RETURN QUERY UPDATE agentsafe.approvals SET
		votes = votes || jsonb_build_array(jsonb_build_object(
			'id', p_approver_id, 'tenant', p_approver_tenant, 'kind', p_approver_kind, 'obo', to_jsonb(p_approver_on_behalf_of),
			'approve', p_approve, 'comment', p_comment, 'at', (extract(epoch FROM t) * 1000000)::bigint)),
		status = CASE WHEN NOT p_approve THEN 'rejected' WHEN decided THEN 'approved' ELSE 'pending' END,
		approver_id = CASE WHEN decided THEN p_approver_id ELSE '' END,
		approver_tenant = CASE WHEN decided THEN p_approver_tenant ELSE '' END,
		approver_kind = CASE WHEN decided THEN p_approver_kind ELSE '' END,
		approver_on_behalf_of = CASE WHEN decided THEN p_approver_on_behalf_of ELSE '{}' END,
		comment = CASE WHEN decided THEN p_comment ELSE '' END,
		decided_at = CASE WHEN decided THEN t END
	WHERE id = p_id
	RETURNING *;
END
$$;

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (1, 'approvals') ON CONFLICT (version) DO NOTHING;

-- agentsafe 0007: approvals bound to a preview of their effect.
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- A capability with a preview has the text approvers see first and the
-- digest of the state it was computed from kept in its records; a resume
-- whose preview computes another digest is refused (APPROVAL_STALE).
-- Records made before this migration, or of capabilities without a
-- preview, have both empty.

ALTER TABLE agentsafe.approvals ADD COLUMN IF NOT EXISTS preview_text text NOT NULL DEFAULT '';
ALTER TABLE agentsafe.approvals ADD COLUMN IF NOT EXISTS preview_digest text NOT NULL DEFAULT '';

-- approval_create as in 0001, with the preview: a pending record is the
-- same call's only if its preview digest is the same too (a changed
-- preview is a new request). The old signature is dropped, so that no
-- caller can create a record without saying whether it has a preview.
DROP FUNCTION IF EXISTS agentsafe.approval_create(
	text, text, text, text, integer,
	text, text, text, text[],
	text, text, text, text, text[], text, text,
	interval, bytea, integer, interval, interval);

CREATE OR REPLACE FUNCTION agentsafe.approval_create(
	p_id text, p_audience text, p_procedure text, p_type text, p_quorum integer,
	p_requester_id text, p_requester_tenant text, p_requester_kind text, p_requester_on_behalf_of text[],
	p_requested_by text, p_digest text, p_binding text, p_view text, p_reasons text[], p_side_effect text, p_risk text,
	p_expires_in interval, p_payload bytea, p_max_pending integer, p_retention interval, p_skew interval,
	p_preview_text text, p_preview_digest text)
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
			AND r.procedure = p_procedure AND r.digest = p_digest AND r.preview_digest = p_preview_digest THEN
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
		status, requested_at, expires_at, retention, retain_until, preview_text, preview_digest)
	VALUES (
		p_id, p_audience, p_procedure, p_type, p_quorum,
		p_requester_id, p_requester_tenant, p_requester_kind, p_requester_on_behalf_of,
		p_requested_by, p_digest, p_binding, p_view, p_reasons, p_side_effect, p_risk, p_expires_in, p_payload,
		'pending', t, t + p_expires_in, p_retention, t + p_expires_in + p_retention, p_preview_text, p_preview_digest)
	RETURNING *;
END
$$;

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (7, 'preview') ON CONFLICT (version) DO NOTHING;

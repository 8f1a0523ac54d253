-- agentsafe 0005: quorum voters are distinct only when their principals are.
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- An actor's principals are its id and every entry of its on_behalf_of
-- chain. A vote under a quorum counts only when the voter's principals are
-- disjoint from every earlier voter's, so that two assistants acting for
-- carol are carol once; 0001 compared ids with chains only, and let two
-- delegates of one person both count.

-- approval_vote records one vote on a pending, unexpired record of
-- p_audience, under the record's row lock: it returns the record after the
-- vote, or no row when the vote is refused (a repeat, a record no longer
-- pending or expired, or a voter who shares a principal with an earlier
-- one). A rejection rejects; the record is approved at the quorum's vote.
CREATE OR REPLACE FUNCTION agentsafe.approval_vote(
	p_id text, p_audience text, p_approve boolean,
	p_approver_id text, p_approver_tenant text, p_approver_kind text, p_approver_on_behalf_of text[],
	p_comment text, p_skew interval)
RETURNS SETOF agentsafe.approvals LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	r agentsafe.approvals;
	decided boolean;
	principals text[] := array_prepend(p_approver_id, coalesce(p_approver_on_behalf_of, '{}'));
BEGIN
	SELECT * INTO r FROM agentsafe.approvals WHERE id = p_id FOR UPDATE;
	IF NOT FOUND OR r.audience <> p_audience OR r.status <> 'pending' OR t >= r.expires_at THEN
		RETURN;
	END IF;
	-- Distinct voters have disjoint principal sets (id and on_behalf_of,
	-- as store.SharedPrincipal): two delegates of one person count once.
	IF EXISTS (SELECT 1 FROM jsonb_array_elements(r.votes) v
		WHERE v->>'id' = ANY (principals) OR (v->'obo') ?| principals) THEN
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

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (5, 'quorum_principals') ON CONFLICT (version) DO NOTHING;

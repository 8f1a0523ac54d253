-- agentsafe 0004: a quota on what one caller's keys keep (results).
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- Every record has an owner (the audience and whole actor the engine derived
-- its key for, "own_…"), and a record is named by its owner and key. What
-- one owner keeps is bounded by the quota each claim carries: its live
-- records (counted at the claim, in the claim's own step, under a
-- transaction-scoped advisory lock per owner) and the sizes of its live
-- stored results (counted from when each is stored). Records of the
-- schema before this one have no owner: no claim finds them again, and
-- claims of new keys delete them once they are gone.

ALTER TABLE agentsafe.results
	ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS size bigint NOT NULL DEFAULT 0;

-- The primary key becomes (owner, key): it names a record, and serves
-- counting an owner's records.
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_index i
		WHERE i.indrelid = 'agentsafe.results'::regclass AND i.indisprimary AND i.indnatts = 2) THEN
		ALTER TABLE agentsafe.results DROP CONSTRAINT IF EXISTS results_pkey;
		ALTER TABLE agentsafe.results ADD PRIMARY KEY (owner, key);
	END IF;
END
$$;

-- The functions of 0003 take no owner: replaced by those below.
DROP FUNCTION IF EXISTS agentsafe.result_claim(text, text, text, interval, boolean, interval, boolean, interval);
DROP FUNCTION IF EXISTS agentsafe.result_settle(text, text, boolean, text, text, bytea, bytea, text, boolean, interval);

-- result_quota_exceeded reports whether p_owner is at its quota as of t:
-- p_max_records live records, or p_max_bytes bytes of live stored results
-- (zero: no bound of that kind). It takes the owner's advisory lock,
-- held until the transaction ends, so that the claim that calls it counts
-- and inserts before any other claim of the owner counts.
CREATE OR REPLACE FUNCTION agentsafe.result_quota_exceeded(p_owner text, p_max_records integer, p_max_bytes bigint, t timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
	b bigint;
BEGIN
	IF p_max_records <= 0 AND p_max_bytes <= 0 THEN
		RETURN false;
	END IF;
	PERFORM pg_advisory_xact_lock(hashtextextended('agentsafe.results:' || p_owner, 0));
	SELECT count(*), coalesce(sum(x.size) FILTER (WHERE x.s = 'done'), 0) INTO n, b
	FROM (SELECT r.size, agentsafe.result_state(r.state, r.write_like, r.lease_until, r.expires_at, t) AS s
		FROM agentsafe.results r WHERE r.owner = p_owner) x
	WHERE x.s <> 'gone';
	RETURN (p_max_records > 0 AND n >= p_max_records) OR (p_max_bytes > 0 AND b >= p_max_bytes);
END
$$;

-- result_claim is the first step of every call with a key, in one call
-- under the record's row lock (and, for a new record, its owner's quota
-- lock): it answers status (acquired, reconcile, in_flight, key_reused,
-- done, in_doubt or quota_exceeded), the execution it names, and for done
-- the stored result.
CREATE OR REPLACE FUNCTION agentsafe.result_claim(
	p_owner text, p_key text, p_digest text, p_execution_id text, p_lease interval, p_write_like boolean,
	p_retention interval, p_reconcile boolean, p_max_records integer, p_max_bytes bigint, p_skew interval,
	OUT status text, OUT execution_id text,
	OUT result_execution_id text, OUT result_code text, OUT envelope bytea, OUT sealed bytea, OUT key_id text, OUT late boolean)
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	r agentsafe.results;
	s text;
	holder text;
BEGIN
	execution_id := '';
	LOOP
		SELECT * INTO r FROM agentsafe.results WHERE owner = p_owner AND key = p_key FOR UPDATE;
		IF NOT FOUND THEN
			-- A few gone records of other keys go first, at no cost to a
			-- claim that finds its key.
			DELETE FROM agentsafe.results WHERE (owner, key) IN (
				SELECT x.owner, x.key FROM agentsafe.results x WHERE x.expires_at <= t ORDER BY x.expires_at LIMIT 10 FOR UPDATE SKIP LOCKED);
			IF agentsafe.result_quota_exceeded(p_owner, p_max_records, p_max_bytes, t) THEN
				-- A claim of this very key may have been counted while this
				-- one waited for the owner's lock: answer as its repeat.
				PERFORM 1 FROM agentsafe.results WHERE owner = p_owner AND key = p_key;
				IF FOUND THEN
					CONTINUE;
				END IF;
				status := 'quota_exceeded';
				RETURN;
			END IF;
			INSERT INTO agentsafe.results (owner, key, digest, state, execution_id, write_like, claimed_at, lease_until, retention, expires_at)
			VALUES (p_owner, p_key, p_digest, 'in_flight', p_execution_id, p_write_like, t, t + p_lease, p_retention,
				CASE WHEN p_write_like THEN t + p_lease + p_retention ELSE t + p_lease END)
			ON CONFLICT (owner, key) DO NOTHING;
			IF FOUND THEN
				status := 'acquired';
				RETURN;
			END IF;
			CONTINUE; -- another claim inserted it first: lock that one
		END IF;
		EXIT;
	END LOOP;
	s := agentsafe.result_state(r.state, r.write_like, r.lease_until, r.expires_at, t);
	IF s <> 'gone' AND r.digest <> p_digest THEN
		status := 'key_reused';
		RETURN;
	END IF;
	IF s = 'done' THEN
		status := 'done';
		execution_id := r.execution_id;
		result_execution_id := r.result_execution_id;
		result_code := r.result_code;
		envelope := r.envelope;
		sealed := r.sealed;
		key_id := r.key_id;
		late := r.late;
		RETURN;
	END IF;
	IF s = 'in_flight' THEN
		IF r.execution_id <> p_execution_id THEN
			status := 'in_flight';
			execution_id := r.execution_id;
		ELSIF r.reconcile_of <> '' THEN
			status := 'reconcile'; -- repeated by the reconciler
			execution_id := r.reconcile_of;
		ELSE
			status := 'acquired'; -- repeated by the holder
		END IF;
		RETURN;
	END IF;
	IF s = 'in_doubt' AND NOT p_reconcile THEN
		status := 'in_doubt';
		execution_id := r.execution_id;
		RETURN;
	END IF;
	-- Gone (a new record, held to the quota), or in doubt and claimed to
	-- reconcile: a fresh claim.
	IF s = 'gone' AND agentsafe.result_quota_exceeded(p_owner, p_max_records, p_max_bytes, t) THEN
		status := 'quota_exceeded';
		RETURN;
	END IF;
	holder := CASE WHEN s = 'in_doubt' THEN r.execution_id ELSE '' END;
	UPDATE agentsafe.results SET
		digest = p_digest, state = 'in_flight', execution_id = p_execution_id, reconcile_of = holder,
		write_like = p_write_like, claimed_at = t, lease_until = t + p_lease, retention = p_retention, done_at = NULL,
		expires_at = CASE WHEN p_write_like THEN t + p_lease + p_retention ELSE t + p_lease END,
		result_execution_id = '', result_code = '', envelope = NULL, sealed = NULL, key_id = '', late = false, size = 0
	WHERE owner = p_owner AND key = p_key;
	IF holder <> '' THEN
		status := 'reconcile';
		execution_id := holder;
	ELSE
		status := 'acquired';
	END IF;
END
$$;

-- result_settle makes the record of (p_owner, p_key) held by p_execution_id
-- done (with its result, whose size counts against the owner's byte quota)
-- or in doubt, under the row lock, its retention from now. It answers
-- 'settled', 'kept' (nothing to do: done already, or in doubt already when
-- marking in doubt) or 'not_held'. A done record is never changed; a result
-- replaces in doubt (a late result).
CREATE OR REPLACE FUNCTION agentsafe.result_settle(
	p_owner text, p_key text, p_execution_id text, p_done boolean,
	p_result_execution_id text, p_result_code text, p_envelope bytea, p_sealed bytea, p_key_id text, p_late boolean,
	p_size bigint, p_skew interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	r agentsafe.results;
	s text;
BEGIN
	SELECT * INTO r FROM agentsafe.results WHERE owner = p_owner AND key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		RETURN 'not_held';
	END IF;
	s := agentsafe.result_state(r.state, r.write_like, r.lease_until, r.expires_at, t);
	IF s = 'gone' OR r.execution_id <> p_execution_id THEN
		RETURN 'not_held';
	END IF;
	IF s = 'done' OR (NOT p_done AND r.state = 'in_doubt') THEN
		RETURN 'kept';
	END IF;
	IF p_done THEN
		UPDATE agentsafe.results SET state = 'done', done_at = t, expires_at = t + retention, reconcile_of = '',
			result_execution_id = p_result_execution_id, result_code = p_result_code, envelope = p_envelope, sealed = p_sealed,
			key_id = p_key_id, late = p_late, size = p_size
		WHERE owner = p_owner AND key = p_key;
	ELSE
		-- A reconciler that could not tell leaves the key in doubt about the
		-- execution it reconciled, which may have run; it ran nothing.
		UPDATE agentsafe.results SET state = 'in_doubt', done_at = t, expires_at = t + retention, reconcile_of = '',
			execution_id = CASE WHEN r.reconcile_of <> '' THEN r.reconcile_of ELSE r.execution_id END
		WHERE owner = p_owner AND key = p_key;
	END IF;
	RETURN 'settled';
END
$$;

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (4, 'result_quota') ON CONFLICT (version) DO NOTHING;

-- agentsafe 0003: stored results of calls with an idempotency key.
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- Every decision about time uses the database clock (clock_timestamp());
-- the skew parameters are zero outside agentsafe's own tests.

-- One row per result key. state is the stored state; a write-like claim
-- past lease_until reads in_doubt (from lease_until on), a read's claim past
-- it is gone, and any record is gone from expires_at on. A gone row is
-- overwritten by the next claim of its key, or deleted by a later claim.
CREATE TABLE IF NOT EXISTS agentsafe.results (
	key                 text PRIMARY KEY,
	digest              text NOT NULL,
	state               text NOT NULL,
	execution_id        text NOT NULL,
	-- The execution whose doubt execution_id reconciles, while in flight.
	reconcile_of        text NOT NULL DEFAULT '',
	write_like          boolean NOT NULL,
	claimed_at          timestamptz NOT NULL,
	lease_until         timestamptz NOT NULL,
	retention           interval NOT NULL,
	done_at             timestamptz,
	expires_at          timestamptz NOT NULL,
	-- The stored result, once done; envelope and sealed are the engine's
	-- opaque bytes.
	result_execution_id text NOT NULL DEFAULT '',
	result_code         text NOT NULL DEFAULT '',
	envelope            bytea,
	sealed              bytea,
	key_id              text NOT NULL DEFAULT '',
	late                boolean NOT NULL DEFAULT false
);

-- Garbage collection.
CREATE INDEX IF NOT EXISTS results_expires_at ON agentsafe.results (expires_at);

-- result_state is a record's state as of at: in_flight, done or in_doubt,
-- or gone (a read's claim past its lease, or any record past expires_at).
CREATE OR REPLACE FUNCTION agentsafe.result_state(state text, write_like boolean, lease_until timestamptz, expires_at timestamptz, at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT CASE
		WHEN state = 'in_flight' AND at >= lease_until AND NOT write_like THEN 'gone'
		WHEN at >= expires_at THEN 'gone'
		WHEN state = 'in_flight' AND at >= lease_until THEN 'in_doubt'
		ELSE state
	END
$$;

-- result_claim is the first step of every call with a key, in one call
-- under the key's row lock: it answers status (acquired, reconcile,
-- in_flight, key_reused, done or in_doubt), the execution it names, and
-- for done the stored result.
CREATE OR REPLACE FUNCTION agentsafe.result_claim(
	p_key text, p_digest text, p_execution_id text, p_lease interval, p_write_like boolean,
	p_retention interval, p_reconcile boolean, p_skew interval,
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
		SELECT * INTO r FROM agentsafe.results WHERE key = p_key FOR UPDATE;
		IF NOT FOUND THEN
			-- A few gone records of other keys go first, at no cost to a
			-- claim that finds its key.
			DELETE FROM agentsafe.results WHERE key IN (
				SELECT x.key FROM agentsafe.results x WHERE x.expires_at <= t ORDER BY x.expires_at LIMIT 10 FOR UPDATE SKIP LOCKED);
			INSERT INTO agentsafe.results (key, digest, state, execution_id, write_like, claimed_at, lease_until, retention, expires_at)
			VALUES (p_key, p_digest, 'in_flight', p_execution_id, p_write_like, t, t + p_lease, p_retention,
				CASE WHEN p_write_like THEN t + p_lease + p_retention ELSE t + p_lease END)
			ON CONFLICT (key) DO NOTHING;
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
	-- Gone, or in doubt and claimed to reconcile: a fresh claim.
	holder := CASE WHEN s = 'in_doubt' THEN r.execution_id ELSE '' END;
	UPDATE agentsafe.results SET
		digest = p_digest, state = 'in_flight', execution_id = p_execution_id, reconcile_of = holder,
		write_like = p_write_like, claimed_at = t, lease_until = t + p_lease, retention = p_retention, done_at = NULL,
		expires_at = CASE WHEN p_write_like THEN t + p_lease + p_retention ELSE t + p_lease END,
		result_execution_id = '', result_code = '', envelope = NULL, sealed = NULL, key_id = '', late = false
	WHERE key = p_key;
	IF holder <> '' THEN
		status := 'reconcile';
		execution_id := holder;
	ELSE
		status := 'acquired';
	END IF;
END
$$;

-- result_settle makes the record of p_key held by p_execution_id done (with
-- its result) or in doubt, under the row lock, its retention from now. It
-- answers 'settled', 'kept' (nothing to do: done already, or in doubt
-- already when marking in doubt) or 'not_held'. A done record is never
-- changed; a result replaces in doubt (a late result).
CREATE OR REPLACE FUNCTION agentsafe.result_settle(
	p_key text, p_execution_id text, p_done boolean,
	p_result_execution_id text, p_result_code text, p_envelope bytea, p_sealed bytea, p_key_id text, p_late boolean,
	p_skew interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz := clock_timestamp() + p_skew;
	r agentsafe.results;
	s text;
BEGIN
	SELECT * INTO r FROM agentsafe.results WHERE key = p_key FOR UPDATE;
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
			key_id = p_key_id, late = p_late
		WHERE key = p_key;
	ELSE
		-- A reconciler that could not tell leaves the key in doubt about the
		-- execution it reconciled, which may have run; it ran nothing.
		UPDATE agentsafe.results SET state = 'in_doubt', done_at = t, expires_at = t + retention, reconcile_of = '',
			execution_id = CASE WHEN r.reconcile_of <> '' THEN r.reconcile_of ELSE r.execution_id END
		WHERE key = p_key;
	END IF;
	RETURN 'settled';
END
$$;

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (3, 'results') ON CONFLICT (version) DO NOTHING;

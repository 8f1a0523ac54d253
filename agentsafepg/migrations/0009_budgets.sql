-- agentsafe 0009: budgets, what capabilities' calls spend over rolling windows.
--
-- Applied by agentsafepg.Migrate, or by an application's own migration tool:
-- the file is idempotent and records its version in
-- agentsafe.schema_migrations itself. Apply it in one transaction.
--
-- Every decision about time uses the database clock (clock_timestamp());
-- the p_now and p_skew parameters are NULL and zero outside agentsafe's
-- own tests, which pin the clock to check a window's edges to the
-- microsecond, or move it.

-- One row per budget key: the row every reservation of the key locks
-- first, so that reservations of one key are one after the other on every
-- instance (under READ COMMITTED, a sum and an insert without it would
-- race). expires_at is when the newest reservation stops counting: the
-- key is garbage from then on.
CREATE TABLE IF NOT EXISTS agentsafe.budgets (
	key        text PRIMARY KEY,
	expires_at timestamptz NOT NULL
);

-- Garbage collection.
CREATE INDEX IF NOT EXISTS budgets_expires_at ON agentsafe.budgets (expires_at);

-- One row per reservation. A reservation counts while reserved_at + the
-- window is after now; an overdraft is one an approved call took past the
-- limit.
CREATE TABLE IF NOT EXISTS agentsafe.budget_reservations (
	key          text NOT NULL REFERENCES agentsafe.budgets (key) ON DELETE CASCADE,
	execution_id text NOT NULL,
	amount       bigint NOT NULL CHECK (amount >= 0),
	reserved_at  timestamptz NOT NULL,
	overdraft    boolean NOT NULL,
	PRIMARY KEY (key, execution_id)
);

CREATE INDEX IF NOT EXISTS budget_reservations_at ON agentsafe.budget_reservations (key, reserved_at);

-- budget_reserve reserves p_amount on p_key for p_execution_id, in one call
-- that locks the key's row before it reads anything: trim what aged out,
-- sum, check, add. It answers reserved, whether the reservation is an
-- overdraft, what the window holds (with it when reserved, without it when
-- refused), and when refused, in how many microseconds enough ages out
-- (0: never, the amount is over the limit). A repeat by an execution that
-- holds a reservation answers as the first did, adding nothing.
CREATE OR REPLACE FUNCTION agentsafe.budget_reserve(
	p_key text, p_execution_id text, p_amount bigint, p_limit bigint, p_window interval, p_overdraft boolean,
	p_now timestamptz, p_skew interval,
	OUT reserved boolean, OUT overdraft boolean, OUT spent bigint, OUT retry_after_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz;
	held agentsafe.budget_reservations;
	total numeric;
	need numeric;
	r record;
BEGIN
	-- The key's row first: an INSERT that finds the row locks it too.
	INSERT INTO agentsafe.budgets AS b (key, expires_at) VALUES (p_key, '-infinity')
	ON CONFLICT (key) DO UPDATE SET expires_at = b.expires_at;
	t := coalesce(p_now, clock_timestamp() + p_skew);
	DELETE FROM agentsafe.budget_reservations x WHERE x.key = p_key AND x.reserved_at <= t - p_window;
	SELECT coalesce(sum(x.amount), 0) INTO total FROM agentsafe.budget_reservations x WHERE x.key = p_key;
	retry_after_us := 0;
	SELECT * INTO held FROM agentsafe.budget_reservations x WHERE x.key = p_key AND x.execution_id = p_execution_id;
	IF FOUND THEN
		reserved := true;
		overdraft := held.overdraft;
		spent := total;
		RETURN;
	END IF;
	overdraft := total + p_amount > p_limit;
	IF overdraft AND NOT p_overdraft THEN
		reserved := false;
		overdraft := false;
		spent := total;
		IF p_amount > p_limit THEN
			RETURN;
		END IF;
		need := total + p_amount - p_limit;
		FOR r IN SELECT x.amount, x.reserved_at FROM agentsafe.budget_reservations x
			WHERE x.key = p_key ORDER BY x.reserved_at, x.execution_id
		LOOP
			need := need - r.amount;
			IF need <= 0 THEN
				retry_after_us := floor(extract(epoch FROM (r.reserved_at + p_window - t)) * 1000000);
				RETURN;
			END IF;
		END LOOP;
		RETURN;
	END IF;
	INSERT INTO agentsafe.budget_reservations (key, execution_id, amount, reserved_at, overdraft)
	VALUES (p_key, p_execution_id, p_amount, t, overdraft);
	UPDATE agentsafe.budgets b SET expires_at = greatest(b.expires_at, t + p_window) WHERE b.key = p_key;
	reserved := true;
	spent := total + p_amount;
	-- A few keys whose every reservation stopped counting go, at no cost to
	-- a key in use.
	DELETE FROM agentsafe.budgets WHERE key IN (
		SELECT g.key FROM agentsafe.budgets g WHERE g.expires_at <= t AND g.key <> p_key
		ORDER BY g.expires_at LIMIT 10 FOR UPDATE SKIP LOCKED);
END
$$;

-- The audit trail keeps what a budget decided: on capability.started and
-- capability.budget_exceeded, the budget, the call's amount, what the
-- window held and the limit; on a refusal, when enough of it frees. In a
-- chained row (0008) they are fields of what its hash covers: budget,
-- budget_amount, budget_spent, budget_limit and retry_after_us (the
-- interval in microseconds).
ALTER TABLE agentsafe.audit_events
	ADD COLUMN IF NOT EXISTS budget text,
	ADD COLUMN IF NOT EXISTS budget_amount bigint,
	ADD COLUMN IF NOT EXISTS budget_spent bigint,
	ADD COLUMN IF NOT EXISTS budget_limit bigint,
	ADD COLUMN IF NOT EXISTS retry_after interval;

INSERT INTO agentsafe.schema_migrations (version, name) VALUES (9, 'budgets') ON CONFLICT (version) DO NOTHING;

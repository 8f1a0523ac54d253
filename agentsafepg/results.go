package agentsafepg

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// ResultStore keeps the results of calls that carry an idempotency key in
// PostgreSQL, so that a key is claimed, run and replayed once across every
// server instance that shares the database. It implements
// [store.ResultStore].
//
// A key's record is one row of agentsafe.results, named by its owner and
// key. Claim, Complete and MarkInDoubt are each one call of a SQL function
// that locks the key's row and checks everything before it writes; Release
// is one conditional DELETE; each is one round trip, and safe to repeat
// after a lost reply. A claim of a new key counts its owner's live records
// and stored bytes against the claim's quota in the same call, under a
// transaction-scoped advisory lock per owner, so that racing claims of one
// owner never pass its quota (migration 0004).
// Leases and retention are decided with the database's clock
// (clock_timestamp()), never an instance's. Records that are gone are
// overwritten by the next claim of their key, and a claim of a new key
// deletes a few gone records of others.
type ResultStore struct {
	pool *pgxpool.Pool
	// skew is added to the database clock in every statement: nil outside
	// this package's tests, which move the clock forward.
	skew func() time.Duration
}

var _ store.ResultStore = (*ResultStore)(nil)

// NewResultStore returns a result store on pool. It fails when the
// database cannot be reached or lacks the schema ([Migrate] creates it).
// The store never closes pool.
func NewResultStore(pool *pgxpool.Pool) (*ResultStore, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewResultStore needs a pool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := checkSchema(ctx, pool, schemaVersion); err != nil {
		return nil, err
	}
	return &ResultStore{pool: pool}, nil
}

func (s *ResultStore) clockSkew() time.Duration {
	if s.skew == nil {
		return 0
	}
	return s.skew()
}

var claimStatuses = map[string]store.ClaimStatus{
	"acquired": store.ClaimAcquired, "reconcile": store.ClaimReconcile, "in_flight": store.ClaimInFlight,
	"key_reused": store.ClaimKeyReused, "done": store.ClaimDone, "in_doubt": store.ClaimInDoubt,
	"quota_exceeded": store.ClaimQuotaExceeded,
}

// Claim implements [store.ResultStore]: one call of agentsafe.result_claim,
// which holds the key's row lock while it decides and writes (a new key:
// an INSERT that one of racing claims wins, the others then lock its row).
func (s *ResultStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	if !req.ResultKey.Valid() {
		return store.Claim{}, fmt.Errorf("agentsafepg: %q of owner %q is not a result key", req.Key, req.Owner)
	}
	var (
		status, execution    string
		resExec, code, keyID *string
		envelope, sealed     []byte
		late                 *bool
	)
	err := s.pool.QueryRow(ctx, "SELECT * FROM agentsafe.result_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
		req.Owner, req.Key, req.Digest, req.ExecutionID, req.Lease, req.WriteLike, req.Retention, req.Reconcile,
		min(req.Quota.Records, math.MaxInt32), req.Quota.Bytes, s.clockSkew()).
		Scan(&status, &execution, &resExec, &code, &envelope, &sealed, &keyID, &late)
	if err != nil {
		return store.Claim{}, err
	}
	st, ok := claimStatuses[status]
	if !ok {
		return store.Claim{}, fmt.Errorf("agentsafepg: result_claim answered %q", status)
	}
	c := store.Claim{Status: st, ExecutionID: execution}
	if st == store.ClaimDone {
		c.Result = store.Result{ExecutionID: deref(resExec), Code: deref(code), Envelope: envelope, Sealed: orNilBytes(sealed),
			KeyID: deref(keyID), Late: late != nil && *late}
	}
	return c, nil
}

// settle runs agentsafe.result_settle.
func (s *ResultStore) settle(ctx context.Context, key store.ResultKey, executionID string, done bool, r store.Result) error {
	if !key.Valid() {
		return store.ErrNotHeld
	}
	var answer string
	err := s.pool.QueryRow(ctx, "SELECT agentsafe.result_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
		key.Owner, key.Key, executionID, done, r.ExecutionID, r.Code, r.Envelope, r.Sealed, r.KeyID, r.Late, r.Size(), s.clockSkew()).Scan(&answer)
	switch {
	case err != nil:
		return err
	case answer == "not_held":
		return store.ErrNotHeld
	}
	return nil // settled, or kept as it was
}

// Complete implements [store.ResultStore]: one call of
// agentsafe.result_settle, under the key's row lock.
func (s *ResultStore) Complete(ctx context.Context, key store.ResultKey, executionID string, r store.Result) error {
	return s.settle(ctx, key, executionID, true, r)
}

// MarkInDoubt implements [store.ResultStore]: one call of
// agentsafe.result_settle, under the key's row lock.
func (s *ResultStore) MarkInDoubt(ctx context.Context, key store.ResultKey, executionID string) error {
	return s.settle(ctx, key, executionID, false, store.Result{})
}

// Release implements [store.ResultStore]: one conditional DELETE of the
// holder's record that is not done.
func (s *ResultStore) Release(ctx context.Context, key store.ResultKey, executionID string) error {
	if !key.Valid() {
		return nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM agentsafe.results r
		WHERE r.owner = $2 AND r.key = $3 AND r.execution_id = $4
			AND agentsafe.result_state(r.state, r.write_like, r.lease_until, r.expires_at, clock_timestamp() + $1::interval) IN ('in_flight', 'in_doubt')`,
		s.clockSkew(), key.Owner, key.Key, executionID)
	return err
}

// Get implements [store.ResultStore]: the record as of the database clock.
func (s *ResultStore) Get(ctx context.Context, key store.ResultKey) (store.ResultRecord, error) {
	if !key.Valid() {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	var (
		rec    store.ResultRecord
		state  string
		doneAt pgtimestamptz
		lapsed bool
		sealed []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT r.owner, r.key, r.digest, v.state, r.execution_id, r.reconcile_of, r.write_like,
			r.claimed_at, r.lease_until, r.retention, r.done_at, r.expires_at, r.state = 'in_flight' AND v.state = 'in_doubt',
			r.result_execution_id, r.result_code, r.envelope, r.sealed, r.key_id, r.late
		FROM agentsafe.results r,
			LATERAL (SELECT agentsafe.result_state(r.state, r.write_like, r.lease_until, r.expires_at, clock_timestamp() + $1::interval) AS state) v
		WHERE r.owner = $2 AND r.key = $3 AND v.state <> 'gone'`, s.clockSkew(), key.Owner, key.Key).
		Scan(&rec.Owner, &rec.Key, &rec.Digest, &state, &rec.ExecutionID, &rec.ReconcileOf, &rec.WriteLike,
			&rec.ClaimedAt, &rec.LeaseUntil, &rec.Retention, &doneAt, &rec.ExpiresAt, &lapsed,
			&rec.Result.ExecutionID, &rec.Result.Code, &rec.Result.Envelope, &sealed, &rec.Result.KeyID, &rec.Result.Late)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	if err != nil {
		return store.ResultRecord{}, err
	}
	st, ok := store.ParseResultState(state)
	if !ok {
		return store.ResultRecord{}, fmt.Errorf("agentsafepg: result %s has the state %q", key, state)
	}
	rec.State, rec.DoneAt, rec.Result.Sealed = st, timeOf(doneAt), orNilBytes(sealed)
	if lapsed { // a write-like claim past its lease: in doubt from then
		rec.DoneAt = rec.LeaseUntil
	}
	if st != store.ResultDone {
		rec.Result = store.Result{}
	}
	return rec, nil
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// orNilBytes returns nil for an empty slice: a result without a response
// comes back without one.
func orNilBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clip(b)
}

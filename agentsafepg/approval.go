package agentsafepg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// ApprovalStore keeps approvals in PostgreSQL, so that an approval
// executes at most once across every server instance that shares the
// database. It implements [store.ApprovalStore].
//
// A record is one row of agentsafe.approvals holding status and consumer
// together. Every state change is one statement that checks everything
// before it writes: Consume, Release and RecordOutcome are each one
// conditional UPDATE … RETURNING (one round trip), Create and Decide one
// call of a SQL function that locks what it decides on. Every expiry and
// lease is decided with the database's clock (clock_timestamp()), never an
// instance's. When a conditional statement changes nothing, a read of the
// record names the reason; it never writes.
type ApprovalStore struct {
	pool *pgxpool.Pool
	cfg  approvalConfig
}

var _ store.ApprovalStore = (*ApprovalStore)(nil)

// setupTimeout bounds the schema check of the constructors.
const setupTimeout = 5 * time.Second

// NewApprovalStore returns a store on pool. It fails when the database
// cannot be reached or lacks the schema ([Migrate] creates it). The store
// never closes pool.
func NewApprovalStore(pool *pgxpool.Pool, opts ...ApprovalOption) (*ApprovalStore, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewApprovalStore needs a pool")
	}
	cfg := defaultApprovalConfig()
	for _, o := range opts {
		if o != nil {
			o.applyApproval(&cfg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := checkSchema(ctx, pool, schemaVersion); err != nil {
		return nil, err
	}
	return &ApprovalStore{pool: pool, cfg: cfg}, nil
}

// Create implements [store.ApprovalStore]: one call of
// agentsafe.approval_create, which holds a lock on the requester (by
// audience, tenant and id) while it looks for the same pending call,
// counts the pending records and inserts.
func (s *ApprovalStore) Create(ctx context.Context, req store.ApprovalRequest) (store.ApprovalRecord, error) {
	if err := store.CheckRequest(req); err != nil {
		return store.ApprovalRecord{}, err
	}
	a := req.Requester
	rows, err := s.pool.Query(ctx, "SELECT "+recordColumns("a.status")+", a.payload FROM agentsafe.approval_create("+
		"$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23) a",
		req.ID, req.Audience, req.Procedure, req.Type, req.Quorum,
		a.ID, a.Tenant, a.Kind, list(a.OnBehalfOf),
		req.RequestedBy, req.Digest, binding(req.Audience, a, req.Procedure, req.Type, req.Quorum, req.Digest), req.View, list(req.Reasons), req.SideEffect, req.Risk,
		req.ExpiresIn, payload(req.Payload), s.cfg.maxPending, s.cfg.retention, s.cfg.clockSkew(), req.PreviewText, req.PreviewDigest)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	recs, err := collect(rows, true)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	if len(recs) == 0 {
		return store.ApprovalRecord{}, fmt.Errorf("%w: %d pending", store.ErrTooManyPending, s.cfg.maxPending)
	}
	return recs[0], nil
}

// Get implements [store.ApprovalStore]. The status is read as of the
// database clock.
func (s *ApprovalStore) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	if !store.ValidApprovalID(id) {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	rows, err := s.pool.Query(ctx, "SELECT "+recordColumns(statusAsOf)+", a.payload FROM agentsafe.approvals a, "+clock+" WHERE a.id = $2",
		s.cfg.clockSkew(), id)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	recs, err := collect(rows, true)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	if len(recs) == 0 {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	return recs[0], nil
}

// Decide implements [store.ApprovalStore]. It reads the record and
// applies the approver rule and policy in Go (application code, which may
// be slow; the requester and approval type never change); then one call of
// agentsafe.approval_vote checks, under the record's row lock, that it is
// pending, unexpired and of the decision's audience and that the voter
// shares no principal with any earlier one, and records the vote.
func (s *ApprovalStore) Decide(ctx context.Context, id string, d store.Decision) (store.ApprovalRecord, bool, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return store.ApprovalRecord{}, false, err
	}
	if rec.Audience != d.Audience {
		return store.ApprovalRecord{}, false, store.ErrApprovalNotFound
	}
	if err := s.cfg.checkApprover(ctx, rec, d.Approver); err != nil {
		return store.ApprovalRecord{}, false, err
	}
	a := d.Approver
	for range maxTries {
		rows, err := s.pool.Query(ctx, "SELECT "+recordColumns("a.status")+", a.payload FROM agentsafe.approval_vote($1, $2, $3, $4, $5, $6, $7, $8, $9) a",
			id, d.Audience, d.Approve, a.ID, a.Tenant, a.Kind, list(a.OnBehalfOf), d.Comment, s.cfg.clockSkew())
		if err != nil {
			return store.ApprovalRecord{}, false, err
		}
		recs, err := collect(rows, true)
		if err != nil {
			return store.ApprovalRecord{}, false, err
		}
		if len(recs) == 1 {
			return recs[0], true, nil
		}
		// Refused: say why, from the record as it is now.
		rec, err := s.Get(ctx, id)
		if errors.Is(err, store.ErrApprovalNotFound) {
			return store.ApprovalRecord{}, false, err
		}
		if err != nil {
			return store.ApprovalRecord{}, false, err
		}
		switch err := store.CheckVote(&rec, rec.Status, d, s.cfg.allowSelf); err {
		case nil: // nothing refuses it now: vote again
		case store.ErrRepeatedVote:
			return rec, false, nil
		default:
			return store.ApprovalRecord{}, false, err
		}
	}
	return store.ApprovalRecord{}, false, fmt.Errorf("agentsafepg: the votes on %s keep changing; try again", id)
}

// maxTries bounds the statements of a Decide or Consume whose refusal a
// later read cannot explain (the record changed in between).
const maxTries = 3

// consumeSQL consumes an approved record in one conditional UPDATE: it
// writes only when every check of the contract holds, as of the database
// clock, and returns only what the execution needs (the deciding vote).
// The binding column stands for audience, whole actor, procedure, approval
// type, quorum and digest at once; the preview digest is compared when the
// resume has one ($6; empty when the capability has no preview).
const consumeSQL = `UPDATE agentsafe.approvals a SET
	status = 'consumed', consumed_by = $2, consumed_at = clock_timestamp() + $1::interval, lease = $3::interval,
	retain_until = greatest(a.expires_at, clock_timestamp() + $1::interval + $3::interval) + a.retention
WHERE a.id = $4 AND a.status = 'approved' AND clock_timestamp() + $1::interval < a.expires_at AND a.binding = $5
	AND ($6 = '' OR a.preview_digest = $6)
RETURNING a.approval_type, a.approver_id, a.approver_tenant, a.approver_kind, a.approver_on_behalf_of, a.comment, a.decided_at`

// Consume implements [store.ApprovalStore]: one conditional UPDATE …
// RETURNING, in one round trip. When it changes nothing, a read of the
// record names the refusal, or finds the record consumed by this very
// execution (a retry after a lost reply), which succeeds; a record that
// passes every check by then (a Release in between) is consumed again.
func (s *ApprovalStore) Consume(ctx context.Context, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	if !store.ValidApprovalID(id) {
		return store.ConsumedApproval{}, store.ErrApprovalNotFound
	}
	bound := binding(req.Audience, req.Actor, req.Procedure, req.Type, req.Quorum, req.Digest)
	for range maxTries {
		got := store.ConsumedApproval{ID: id}
		var decidedAt pgtimestamptz
		err := s.pool.QueryRow(ctx, consumeSQL, s.cfg.clockSkew(), req.ExecutionID, req.Lease, id, bound, req.PreviewDigest).
			Scan(&got.Type, &got.Approver.ID, &got.Approver.Tenant, &got.Approver.Kind, &got.Approver.OnBehalfOf, &got.Comment, &decidedAt)
		if err == nil {
			got.DecidedAt = timeOf(decidedAt)
			got.Approver.OnBehalfOf = orNil(got.Approver.OnBehalfOf)
			return got, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.ConsumedApproval{}, err
		}
		rec, err := s.Get(ctx, id)
		if err != nil {
			return store.ConsumedApproval{}, err
		}
		switch err := store.CheckConsume(&rec, rec.Status, req); err {
		case nil: // released in between: consume again
		case store.ErrConsumedByCaller:
			return consumedApproval(&rec), nil
		default:
			return store.ConsumedApproval{}, err
		}
	}
	return store.ConsumedApproval{}, fmt.Errorf("agentsafepg: %s keeps changing while it is consumed; try again", id)
}

// Release implements [store.ApprovalStore]: one conditional UPDATE.
func (s *ApprovalStore) Release(ctx context.Context, id, executionID string) error {
	if !store.ValidApprovalID(id) {
		return nil
	}
	_, err := s.pool.Exec(ctx, `UPDATE agentsafe.approvals SET
		status = 'approved', consumed_by = '', consumed_at = NULL, lease = NULL, retain_until = expires_at + retention
		WHERE id = $1 AND status = 'consumed' AND consumed_by = $2 AND consumed_by <> ''`, id, executionID)
	return err
}

// outcomeSQL records an outcome in one statement: the conditional UPDATE,
// and whether the record is this execution's at all (from the statement's
// snapshot; only Release, which the engine never runs beside an outcome,
// changes a record's consumer).
const outcomeSQL = `WITH c AS (SELECT clock_timestamp() + $1::interval AS t),
u AS (
	UPDATE agentsafe.approvals a SET
		status = $4, outcome_status = $4, outcome_code = $5, outcome_late = $6, outcome_at = c.t
	FROM c
	WHERE a.id = $2 AND a.consumed_by = $3 AND a.consumed_by <> ''
		AND (a.status = 'consumed' OR (a.status = 'in_doubt' AND $4 <> 'in_doubt'))
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM agentsafe.approvals WHERE id = $2 AND consumed_by = $3 AND consumed_by <> '')`

// RecordOutcome implements [store.ApprovalStore]: one statement.
func (s *ApprovalStore) RecordOutcome(ctx context.Context, id, executionID string, o store.Outcome) error {
	if err := store.CheckOutcome(o); err != nil {
		return err
	}
	if !store.ValidApprovalID(id) {
		return store.ErrApprovalNotFound
	}
	var mine bool
	if err := s.pool.QueryRow(ctx, outcomeSQL, s.cfg.clockSkew(), id, executionID, o.Status.String(), o.Code, o.Late).Scan(&mine); err != nil {
		return err
	}
	if !mine {
		return store.ErrApprovalNotFound
	}
	return nil // recorded, or it has its result already
}

// List implements [store.ApprovalStore]: one query that filters by
// audience, tenant and status (as of the database clock) before its
// limit, oldest request first, without the payload.
func (s *ApprovalStore) List(ctx context.Context, f store.ApprovalFilter) ([]store.ApprovalRecord, error) {
	where := "a.audience = $2 AND a.requester_tenant = $3"
	if f.AnyTenant {
		where = "a.audience = $2 AND $3::text IS NOT NULL"
	}
	status := ""
	if f.Status != 0 {
		status = f.Status.String()
		where += " AND " + statusAsOf + " = $4"
	} else {
		where += " AND $4::text IS NOT NULL"
	}
	rows, err := s.pool.Query(ctx, "SELECT "+recordColumns(statusAsOf)+" FROM agentsafe.approvals a, "+clock+
		" WHERE "+where+" ORDER BY a.requested_at, a.id LIMIT $5",
		s.cfg.clockSkew(), f.Audience, f.Tenant, status, listLimit(f))
	if err != nil {
		return nil, err
	}
	return collect(rows, false)
}

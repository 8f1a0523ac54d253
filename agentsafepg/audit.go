package agentsafepg

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/internal/storable"
	"github.com/agentsafe/agentsafe/middleware"
)

// AuditSink is a strict audit sink (middleware.WithAuditSink) that writes
// events to agentsafe.audit_events. It is a middleware.BatchAuditSink:
// the engine hands it every record waiting for it at once, and it writes
// them in one INSERT, in order, all or none (group commit); the engine
// runs nothing on a capability.requested or capability.started that was
// not committed. A record is committed when RecordBatch (or Record)
// returns nil.
//
// It stores any event the engine can produce. A text field with a NUL
// byte or bytes that are not UTF-8 is escaped (a backslash as `\\`, each
// such byte as `\xNN`), one longer than its limit is cut (1 KiB for ids,
// names and codes, 16 KiB for an error, a comment or a reason, 64 KiB for a
// stack), and a time PostgreSQL cannot represent is clamped to its range;
// the row's altered column lists each such field ("error:escaped",
// "stack:truncated", "at:clamped"), and is NULL when the row is exactly
// the event. A batch PostgreSQL still refuses for a record's content fails
// with its data exception (SQLSTATE class 22), which the engine splits to
// isolate that record; any other failure (the database unreachable, the
// write's deadline) fails the whole batch, which the engine keeps and
// writes again with its next record, or on its own a little later when
// none comes.
//
// Rows carry no payload: the fields of middleware.Event, with NULL for
// those an event type does not use. They are indexed for every event of an
// execution (execution_id, seq) and every execution of an actor
// (actor_tenant, actor_id, at of capability.requested).
//
// One AuditSink may serve several engines. [AuditSink.Close] stops it.
type AuditSink struct {
	pool *pgxpool.Pool
	// mu is held for reading by each write, and by Close for writing, so
	// that Close returns once the writes in progress have ended.
	mu     sync.RWMutex
	closed bool
}

var _ middleware.BatchAuditSink = (*AuditSink)(nil)

// writeTimeout bounds a write whose context has no deadline (the engine's
// always has one: its audit bound).
const writeTimeout = 5 * time.Second

// AuditOption configures [NewAuditSink]. There are none yet.
type AuditOption interface{ applyAudit(*AuditSink) }

// errClosed is Record's error after Close.
var errClosed = errors.New("agentsafepg: the audit sink is closed")

// NewAuditSink returns an audit sink writing to pool. It fails when the
// database cannot be reached or lacks the schema ([Migrate] creates it).
// The sink never closes pool; close the sink first.
func NewAuditSink(pool *pgxpool.Pool, opts ...AuditOption) (*AuditSink, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewAuditSink needs a pool")
	}
	s := &AuditSink{pool: pool}
	for _, o := range opts {
		if o != nil {
			o.applyAudit(s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := checkSchema(ctx, pool, schemaVersion); err != nil {
		return nil, err
	}
	return s, nil
}

// Record implements middleware.AuditSink: it writes e, and returns once
// it is committed or with the error that kept it from that.
func (s *AuditSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

// RecordBatch implements middleware.BatchAuditSink: it writes events in
// one statement, in order, and returns once they are committed or with
// the error that kept them all from that.
func (s *AuditSink) RecordBatch(ctx context.Context, events []middleware.Event) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if len(events) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeTimeout)
		defer cancel()
	}
	return s.insert(ctx, events)
}

// Close stops the sink once the writes in progress have ended: a later
// Record or RecordBatch fails, so that nothing runs on a record the sink
// will not write. Every record it accepted is committed. Close it after
// the servers whose engines use it have shut down: the engine hands the
// sink each record as it comes, and a record it hands over after Close is
// lost. Closing a closed sink is a no-op.
func (s *AuditSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// insertSQL writes a batch in one statement, in order: one array per
// column, NULL for what an event type does not use.
const insertSQL = `INSERT INTO agentsafe.audit_events (type, at, execution_id, procedure, actor_id, actor_tenant, input_digest,
	side_effect, risk, attempt, attempts, previous_error_code, code, retryable, duration,
	approval_id, approver_id, approver_tenant, comment, reason, succeeded, error, stack, replay_of, altered,
	budget, budget_amount, budget_spent, budget_limit, retry_after)
SELECT e.type, e.at, e.execution_id, e.procedure, nullif(e.actor_id, ''), nullif(e.actor_tenant, ''), nullif(e.input_digest, ''),
	nullif(e.side_effect, ''), nullif(e.risk, ''), nullif(e.attempt, 0), nullif(e.attempts, 0), nullif(e.previous_error_code, ''),
	nullif(e.code, ''), CASE WHEN e.code <> '' THEN e.retryable END, nullif(e.duration, '0'),
	nullif(e.approval_id, ''), nullif(e.approver_id, ''), nullif(e.approver_tenant, ''), nullif(e.comment, ''), nullif(e.reason, ''),
	CASE WHEN e.type = 'capability.abandoned_result' THEN e.succeeded END, nullif(e.error, ''), nullif(e.stack, ''), nullif(e.replay_of, ''),
	string_to_array(nullif(e.altered, ''), ','),
	nullif(e.budget, ''), CASE WHEN e.budget <> '' THEN e.budget_amount END, CASE WHEN e.budget <> '' THEN e.budget_spent END,
	CASE WHEN e.budget <> '' THEN e.budget_limit END, nullif(e.retry_after, '0')
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::text[], $10::int[], $11::int[], $12::text[], $13::text[], $14::bool[], $15::interval[],
	$16::text[], $17::text[], $18::text[], $19::text[], $20::text[], $21::bool[], $22::text[], $23::text[], $24::text[], $25::text[],
	$26::text[], $27::bigint[], $28::bigint[], $29::bigint[], $30::interval[])
	WITH ORDINALITY AS e(type, at, execution_id, procedure, actor_id, actor_tenant, input_digest,
	side_effect, risk, attempt, attempts, previous_error_code, code, retryable, duration,
	approval_id, approver_id, approver_tenant, comment, reason, succeeded, error, stack, replay_of, altered,
	budget, budget_amount, budget_spent, budget_limit, retry_after, n)
ORDER BY e.n`

// The range of PostgreSQL's timestamptz: 4713 BC to 294276 AD.
var (
	minTime = time.Date(-4712, time.November, 24, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(294276, time.December, 31, 23, 59, 59, 999999000, time.UTC)
)

// insert writes events in one statement, each field made storable
// (package internal/storable), with the list of what was altered.
func (s *AuditSink) insert(ctx context.Context, events []middleware.Event) error {
	n := len(events)
	var (
		types, ids, procs, actorIDs, actorTenants, digests = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		sideEffects, risks, prevCodes, codes               = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		approvals, approverIDs, approverTenants, comments  = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		reasons, errs, stacks, replayOf, altered           = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		ats                                                = make([]time.Time, n)
		attempt, attempts                                  = make([]int32, n), make([]int32, n)
		retryable, succeeded                               = make([]bool, n), make([]bool, n)
		durations                                          = make([]time.Duration, n)
		budgets                                            = make([]string, n)
		amounts, spents, limits                            = make([]int64, n), make([]int64, n), make([]int64, n)
		retryAfters                                        = make([]time.Duration, n)
	)
	for i, e := range events {
		var m storable.Marks
		id := func(field, v string) string { return m.Text(field, v, storable.IDMax) }
		text := func(field, v string) string { return m.Text(field, v, storable.TextMax) }
		types[i], ids[i], procs[i] = id("type", string(e.Type)), id("execution_id", e.ExecutionID), id("procedure", e.Procedure)
		switch {
		case e.Time.Before(minTime):
			ats[i] = minTime
			m = append(m, "at:clamped")
		case e.Time.After(maxTime):
			ats[i] = maxTime
			m = append(m, "at:clamped")
		default:
			ats[i] = e.Time
		}
		actorIDs[i], actorTenants[i], digests[i] = id("actor_id", e.Actor.ID), id("actor_tenant", e.Actor.Tenant), id("input_digest", e.InputDigest)
		if e.SideEffect != middleware.SideEffectUnspecified {
			sideEffects[i] = e.SideEffect.String()
		}
		risks[i] = e.Risk.String()
		attempt[i], attempts[i] = clampInt32(e.Attempt), clampInt32(e.Attempts)
		if e.PreviousErrorCode != middleware.CodeOK {
			prevCodes[i] = e.PreviousErrorCode.String()
		}
		if e.Code != middleware.CodeOK {
			codes[i] = e.Code.String()
		}
		retryable[i], durations[i] = e.Retryable, e.Duration
		approvals[i], approverIDs[i], approverTenants[i] = id("approval_id", e.ApprovalID), id("approver_id", e.Approver.ID), id("approver_tenant", e.Approver.Tenant)
		comments[i], reasons[i] = text("comment", e.Comment), text("reason", e.Reason)
		succeeded[i], errs[i], replayOf[i] = e.Succeeded, text("error", e.Error), id("replay_of", e.ReplayOf)
		stacks[i] = m.Text("stack", e.Stack, storable.StackMax)
		budgets[i], amounts[i], spents[i], limits[i], retryAfters[i] = id("budget", e.Budget), e.Amount, e.Spent, e.Limit, e.RetryAfter
		altered[i] = m.String()
	}
	_, err := s.pool.Exec(ctx, insertSQL, types, ats, ids, procs, actorIDs, actorTenants, digests,
		sideEffects, risks, attempt, attempts, prevCodes, codes, retryable, durations,
		approvals, approverIDs, approverTenants, comments, reasons, succeeded, errs, stacks, replayOf, altered,
		budgets, amounts, spents, limits, retryAfters)
	return err
}

// clampInt32 is n within int32: counts the engine keeps small.
func clampInt32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

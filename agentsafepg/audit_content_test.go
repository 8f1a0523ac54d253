package agentsafepg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/storable"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// What one record contains never stops the others (SPEC §8). An
// approver's comment with a NUL byte and a byte that is not UTF-8 (the
// approvals live in a store that takes any string), and a handler error
// that quotes the caller's input with the same, are events PostgreSQL
// cannot store as they are: before, they sat in the sink's batch, which
// every later requested event was written with, so every later call
// failed AUDIT_UNAVAILABLE. Now each of them is stored, and every call
// after them is recorded as usual.
func TestAPoisonedAuditRecordStopsNoOtherCall(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	eng := newEngine(t, approvalstore.NewMemory(), middleware.WithAuditSink(openAudit(t, pool)))
	mustNotRun := func(context.Context) (any, error) { return nil, errors.New("must not run") }

	env, err := execute(ctx, eng, secretInput(1), "", mustNotRun)
	if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
		t.Fatalf("a gated call: %v", err)
	}
	request, approvalID := env.ExecutionID, env.ApprovalID
	if _, err := eng.Decide(ctx, approvalID, store.Decision{Approve: true, Approver: manager, Comment: "ok, the agent wrote \"7\x00\xff\""}); err != nil {
		t.Fatal(err)
	}
	env, err = execute(ctx, eng, secretInput(1), approvalID, func(context.Context) (any, error) {
		return nil, errors.New("no order \"7\x00\xfe\"") // quotes the caller's input
	})
	if middleware.CodeOf(err) != middleware.CodeExecutionFailed {
		t.Fatalf("the resume after a poisoned comment must run (and fail as its handler did): %v", err)
	}
	resume := env.ExecutionID
	for i := range 3 {
		if _, err := execute(ctx, eng, secretInput(2+i), "", mustNotRun); middleware.CodeOf(err) != middleware.CodeApprovalRequired {
			t.Fatalf("call %d after a poisoned error must be recorded as usual: %v", i+1, err)
		}
	}

	// The later calls' requested events were committed after the
	// poisoned ones, which were queued before them: those are stored too.
	var comment, failure string
	var altered []string
	if err := pool.QueryRow(ctx, `SELECT comment, altered FROM agentsafe.audit_events
		WHERE execution_id = $1 AND type = 'capability.approved'`, request).Scan(&comment, &altered); err != nil {
		t.Fatalf("the approval with a poisoned comment is in the trail: %v", err)
	}
	if want := `ok, the agent wrote "7\x00\xff"`; comment != want || len(altered) != 1 || altered[0] != "comment:escaped" {
		t.Errorf("the comment is stored as %q, altered %q; want %q, [comment:escaped]", comment, altered, want)
	}
	if err := pool.QueryRow(ctx, `SELECT error, altered FROM agentsafe.audit_events
		WHERE execution_id = $1 AND type = 'capability.failed'`, resume).Scan(&failure, &altered); err != nil {
		t.Fatalf("the failure with a poisoned error is in the trail: %v", err)
	}
	if want := `no order "7\x00\xfe"`; failure != want || len(altered) != 1 || altered[0] != "error:escaped" {
		t.Errorf("the error is stored as %q, altered %q; want %q, [error:escaped]", failure, altered, want)
	}
}

// TestAuditSinkStoresAnyEvent: every text field with a NUL byte, with
// bytes that are not UTF-8, or longer than its limit, and a time beyond
// PostgreSQL's, is stored (escaped, cut, clamped) and listed in altered;
// a record that needed nothing has altered NULL and is stored as it was.
func TestAuditSinkStoresAnyEvent(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	sink := openAudit(t, pool)
	bad := "x\x00\xff"
	poisoned := middleware.Event{
		Type: middleware.EventFailed, Time: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC),
		ExecutionID: "exe_bad", Procedure: "/p.v1.S/" + bad,
		Actor: middleware.ActorRef{ID: strings.Repeat("a", 5000), Tenant: bad}, InputDigest: bad,
		Code: middleware.CodeExecutionFailed, ApprovalID: bad, Approver: middleware.ActorRef{ID: bad, Tenant: bad},
		Comment: bad, Reason: strings.Repeat("é", 20000), Error: bad, Stack: strings.Repeat("s", 100<<10) + bad, ReplayOf: bad,
	}
	clean := event(middleware.EventCompleted, "exe_clean")
	clean.Error = `a \ backslash, "quotes" and ü`
	if err := sink.RecordBatch(ctx, []middleware.Event{poisoned, clean}); err != nil {
		t.Fatalf("a durable sink stores any event the engine can produce: %v", err)
	}

	var procedure, actorID, actorTenant, reason, errText, stack string
	var at time.Time
	var altered []string
	if err := pool.QueryRow(ctx, `SELECT procedure, actor_id, actor_tenant, reason, error, stack, at, altered
		FROM agentsafe.audit_events WHERE execution_id = 'exe_bad'`).Scan(&procedure, &actorID, &actorTenant, &reason, &errText, &stack, &at, &altered); err != nil {
		t.Fatal(err)
	}
	want := []string{"procedure:escaped", "at:clamped", "actor_id:truncated", "actor_tenant:escaped", "input_digest:escaped",
		"approval_id:escaped", "approver_id:escaped", "approver_tenant:escaped", "comment:escaped", "reason:truncated",
		"error:escaped", "replay_of:escaped", "stack:escaped", "stack:truncated"}
	if !slices.Equal(altered, want) {
		t.Errorf("altered = %q\nwant      %q", altered, want)
	}
	if procedure != `/p.v1.S/x\x00\xff` || errText != `x\x00\xff` || actorTenant != `x\x00\xff` {
		t.Errorf("escaped fields: procedure %q, error %q, tenant %q", procedure, errText, actorTenant)
	}
	if len(actorID) != storable.IDMax || len(reason) > storable.TextMax || !utf8.ValidString(reason) || len(stack) != storable.StackMax {
		t.Errorf("cut fields: actor_id %d bytes (want %d), reason %d (at most %d, valid UTF-8), stack %d (want %d)",
			len(actorID), storable.IDMax, len(reason), storable.TextMax, len(stack), storable.StackMax)
	}
	if at.Year() != 294276 {
		t.Errorf("a time beyond PostgreSQL's range is clamped to its end: %v", at)
	}

	var cleanError string
	var cleanAltered []string
	if err := pool.QueryRow(ctx, `SELECT error, altered FROM agentsafe.audit_events WHERE execution_id = 'exe_clean'`).Scan(&cleanError, &cleanAltered); err != nil {
		t.Fatal(err)
	}
	if cleanError != clean.Error || cleanAltered != nil {
		t.Errorf("a record that needs nothing is stored as it is: error %q, altered %q", cleanError, cleanAltered)
	}
}

// refuseActor makes PostgreSQL refuse, with a data exception (SQLSTATE
// 22023), every audit row of actor: a record the sink cannot store
// whatever it does.
func refuseActor(t *testing.T, pool *pgxpool.Pool, actor string) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `
		CREATE FUNCTION refuse_actor() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.actor_id = '`+actor+`' THEN
				RAISE EXCEPTION 'this row cannot be stored' USING ERRCODE = '22023';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_actor BEFORE INSERT ON agentsafe.audit_events FOR EACH ROW EXECUTE FUNCTION refuse_actor()`); err != nil {
		t.Fatal(err)
	}
}

// TestAuditSinkWritesABatchAllOrNone: a batch with one row PostgreSQL
// refuses writes none of it, and fails with the data exception the engine
// splits on.
func TestAuditSinkWritesABatchAllOrNone(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	refuseActor(t, pool, "mallory")
	sink := openAudit(t, pool)
	bad := event(middleware.EventRequested, "exe_2")
	bad.Actor.ID = "mallory"
	err := sink.RecordBatch(ctx, []middleware.Event{event(middleware.EventRequested, "exe_1"), bad, event(middleware.EventRequested, "exe_3")})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Fatalf("a batch with a row PostgreSQL refuses: %v; want its data exception", err)
	}
	if n := count(t, pool); n != 0 {
		t.Errorf("a failed batch wrote %d rows: all or none", n)
	}
}

// TestAuditSinkIsolatesARecordPostgresRefuses: with many callers sharing
// each INSERT, one actor whose rows PostgreSQL refuses costs only its own
// calls (AUDIT_UNAVAILABLE, nothing run) and its own records (counted as
// dropped); every other call runs, and its whole trail is stored.
func TestAuditSinkIsolatesARecordPostgresRefuses(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	refuseActor(t, pool, "mallory")
	sink := openAudit(t, pool)
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectExternal})
	eng, err := middleware.New(reg, middleware.WithAuditSink(sink), middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)),
		middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
			return middleware.Actor{ID: ctx.Value(actorKey{}).(string), Tenant: "acme"}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	const callers, each = 8, 10
	var mu sync.Mutex
	var ran atomic.Int32
	results := map[string][]middleware.Envelope{}
	errs := map[string][]error{}
	var wg sync.WaitGroup
	for c := range callers {
		actor := fmt.Sprint("agent-", c)
		if c == 3 {
			actor = "mallory"
		}
		wg.Go(func() {
			for i := range each {
				env, err := execute(context.WithValue(ctx, actorKey{}, actor), eng, secretInput(i), "", func(context.Context) (any, error) { ran.Add(1); return "refunded", nil })
				mu.Lock()
				results[actor], errs[actor] = append(results[actor], env), append(errs[actor], err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A last call's requested is queued after every record before it:
	// once it is committed, those are written or refused.
	if _, err := execute(context.WithValue(ctx, actorKey{}, "agent-last"), eng, secretInput(0), "", func(context.Context) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := ran.Load(), int32((callers-1)*each); got != want {
		t.Errorf("%d calls ran; want every call but mallory's, %d", got, want)
	}
	for actor, envs := range results {
		for i, env := range envs {
			err := errs[actor][i]
			if actor == "mallory" {
				if middleware.CodeOf(err) != middleware.CodeAuditUnavailable {
					t.Errorf("mallory's call: %v; want AUDIT_UNAVAILABLE", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s's call: %v; one actor's records must never fail another's calls", actor, err)
			}
			if got, want := types(trail(t, pool, env.ExecutionID)), []string{"capability.requested", "capability.started", "capability.completed"}; !slices.Equal(got, want) {
				t.Errorf("%s's call: trail %v, want %v", actor, got, want)
			}
		}
	}
	if st := auditStats(eng); st.Dropped != each {
		t.Errorf("audit sink %+v: want mallory's %d failures counted as dropped, nothing else", st, each)
	}
}

type actorKey struct{}

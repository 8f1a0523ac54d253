package agentsafepg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// openAudit returns an audit sink on pool, closed when the test ends.
func openAudit(t testing.TB, pool *pgxpool.Pool, opts ...agentsafepg.AuditOption) *agentsafepg.AuditSink {
	t.Helper()
	s, err := agentsafepg.NewAuditSink(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// row is an audit row as a test reads it back.
type row struct {
	Type, Execution string
	ApprovalID      *string
	Code            *string
	Attempt         *int
}

// trail returns the audit rows of execution, oldest first.
func trail(t testing.TB, pool *pgxpool.Pool, execution string) []row {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT type, execution_id, approval_id, code, attempt
		FROM agentsafe.audit_events WHERE execution_id = $1 ORDER BY seq`, execution)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func types(rs []row) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Type)
	}
	return out
}

// secret is in every input of these tests: no audit row may carry it.
const secret = "4242-4242-4242-4242"

func secretInput(n int) adapter.Input {
	return adapter.JSONInput([]byte(`{"order":` + string(rune('0'+n)) + `,"card":"` + secret + `"}`))
}

// TestAuditSinkRecordsTheTrail runs a gated call through an engine with
// the sink as its strict audit trail: the request, and its resume, each
// leave their whole trail in order, free of the payload, found by
// execution and by actor.
func TestAuditSinkRecordsTheTrail(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	sink := newFinals(openAudit(t, pool))
	eng := newEngine(t, openApprovals(t, pool), middleware.WithAuditSink(sink))

	env, err := execute(ctx, eng, secretInput(1), "", func(context.Context) (any, error) { return nil, errors.New("must not run") })
	if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
		t.Fatalf("a gated call: %v", err)
	}
	request, approvalID := env.ExecutionID, env.ApprovalID
	if _, err := eng.Decide(ctx, approvalID, store.Decision{Approve: true, Approver: manager, Comment: "ok"}); err != nil {
		t.Fatal(err)
	}
	env, err = execute(ctx, eng, secretInput(1), approvalID, func(context.Context) (any, error) { return "refunded", nil })
	if err != nil {
		t.Fatal(err)
	}
	resume := env.ExecutionID
	sink.waitFinal(t, resume)

	if got, want := types(trail(t, pool, request)), []string{"capability.requested", "capability.approval_requested", "capability.failed", "capability.approved"}; !slices.Equal(got, want) {
		t.Errorf("the request's trail is %v; want %v", got, want)
	}
	resumed := trail(t, pool, resume)
	if got, want := types(resumed), []string{"capability.requested", "capability.approval_consumed", "capability.started", "capability.completed"}; !slices.Equal(got, want) {
		t.Fatalf("the resume's trail is %v; want %v", got, want)
	}
	if a := resumed[1].ApprovalID; a == nil || *a != approvalID {
		t.Errorf("approval_consumed names approval %v; want %s", a, approvalID)
	}
	if a := resumed[2].Attempt; a == nil || *a != 1 {
		t.Errorf("started names attempt %v; want 1", a)
	}
	if c := resumed[0].Code; c != nil {
		t.Errorf("a field an event does not use is NULL: requested has code %q", *c)
	}

	var executions []string
	rows, err := pool.Query(ctx, `SELECT execution_id FROM agentsafe.audit_events
		WHERE actor_tenant = $1 AND actor_id = $2 AND type = 'capability.requested' ORDER BY at`, agent.Tenant, agent.ID)
	if err != nil {
		t.Fatal(err)
	}
	if executions, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || !slices.Equal(executions, []string{request, resume}) {
		t.Errorf("all executions of the actor: %v, %v; want [%s %s]", executions, err, request, resume)
	}

	var leaks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM agentsafe.audit_events e WHERE row_to_json(e)::text LIKE '%' || $1 || '%'`, secret).Scan(&leaks); err != nil || leaks != 0 {
		t.Errorf("audit rows are payload-free: %d rows carry the input's card number (%v)", leaks, err)
	}
}

// TestAuditIndexes: the two questions an audit asks are answered from an
// index, not by reading the table.
func TestAuditIndexes(t *testing.T) {
	pool := migrated(t)
	for what, query := range map[string]string{
		"all events of an execution": `SELECT * FROM agentsafe.audit_events WHERE execution_id = 'exe_x' ORDER BY seq`,
		"all executions of an actor": `SELECT execution_id FROM agentsafe.audit_events
			WHERE actor_tenant = 'acme' AND actor_id = 'agent-7' AND type = 'capability.requested' ORDER BY at`,
	} {
		var plan []string
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(t.Context(), "EXPLAIN "+query)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "\n"); !strings.Contains(p, "Index") {
			t.Errorf("%s must be answered from an index:\n%s", what, p)
		}
	}
}

// finals is a strict audit sink that says when the sink it wraps was
// handed an execution's final event, and whether it committed it.
type finals struct {
	*agentsafepg.AuditSink
	ch chan final
}

type final struct {
	execution string
	committed bool
}

func newFinals(s *agentsafepg.AuditSink) finals { return finals{s, make(chan final, 64)} }

func (f finals) Record(ctx context.Context, e middleware.Event) error {
	return f.RecordBatch(ctx, []middleware.Event{e})
}

func (f finals) RecordBatch(ctx context.Context, events []middleware.Event) error {
	err := f.AuditSink.RecordBatch(ctx, events)
	for _, e := range events {
		if e.Type.Final() {
			f.ch <- final{e.ExecutionID, err == nil}
		}
	}
	return err
}

// waitFinal waits until the sink committed execution's final event (the
// engine hands events to it through its own queue).
func (f finals) waitFinal(t testing.TB, execution string) {
	t.Helper()
	f.wait(t, execution, true)
}

// waitFinalQueued waits until the sink was handed execution's final
// event, committed or not.
func (f finals) waitFinalQueued(t testing.TB, execution string) {
	t.Helper()
	f.wait(t, execution, false)
}

func (f finals) wait(t testing.TB, execution string, committed bool) {
	t.Helper()
	f.waitWithin(t, execution, committed, 10*time.Second)
}

func (f finals) waitWithin(t testing.TB, execution string, committed bool, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case got := <-f.ch:
			if got.execution == execution && (got.committed || !committed) {
				return
			}
		case <-timeout:
			t.Fatalf("execution %s: the sink never got its final event", execution)
		}
	}
}

// event is a synthetic event of execution.
func event(typ middleware.EventType, execution string) middleware.Event {
	return middleware.Event{Type: typ, Time: time.Now(), ExecutionID: execution, Procedure: refund,
		Actor: middleware.ActorRef{ID: agent.ID, Tenant: agent.Tenant}, SideEffect: middleware.SideEffectExternal}
}

// count is the number of event rows (the chain's checkpoint rows aside).
func count(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM agentsafe.audit_events WHERE type NOT LIKE 'audit.%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAuditSinkCommitsBeforeItReturns: Record and RecordBatch return once
// their events are committed (another session sees them), in order; after
// Close they fail, so that nothing runs on a record the sink will not
// write.
func TestAuditSinkCommitsBeforeItReturns(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	sink := openAudit(t, pool)
	other := newPool(t, pool.Config().ConnString()) // another session sees only what is committed

	if err := sink.Record(ctx, event(middleware.EventRequested, "exe_1")); err != nil {
		t.Fatal(err)
	}
	if n := count(t, other); n != 1 {
		t.Fatalf("requested must be committed when Record returns: %d rows", n)
	}
	batch := []middleware.Event{event(middleware.EventApprovalConsumed, "exe_1"), event(middleware.EventStarted, "exe_1"), event(middleware.EventCompleted, "exe_1")}
	if err := sink.RecordBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	got := types(trail(t, other, "exe_1"))
	if want := []string{"capability.requested", "capability.approval_consumed", "capability.started", "capability.completed"}; !slices.Equal(got, want) {
		t.Errorf("a batch is committed when RecordBatch returns, in order: %v; want %v", got, want)
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sink.Record(ctx, event(middleware.EventRequested, "exe_2")); err == nil {
		t.Error("Record after Close must fail: nothing may run on an event the sink will not record")
	}
}

// TestAuditSinkFailsClosedWhenPostgresStops: with the database down, a
// requested event fails, so the engine runs nothing (AUDIT_UNAVAILABLE);
// the events queued meanwhile (the end of a call that was running, the
// refused call's failure) are written once it is back, before any other
// call comes; nothing is dropped.
func TestAuditSinkFailsClosedWhenPostgresStops(t *testing.T) {
	ctx := t.Context()
	srv := startMigrated(t)
	pool := quickPool(t, srv.URL())
	sink := newFinals(openAudit(t, pool))
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectExternal})
	eng, err := middleware.New(reg, middleware.WithAuditSink(sink), middleware.WithProtoFiles(nil),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	handler := func(context.Context) (any, error) { ran++; return "refunded", nil }

	// The first call runs while PostgreSQL stops: its completed event
	// comes when the database is down, and waits for it.
	started, release := make(chan struct{}), make(chan struct{})
	var before middleware.Envelope
	returned := make(chan error)
	go func() {
		var err error
		before, err = execute(ctx, eng, secretInput(1), "", func(ctx context.Context) (any, error) {
			close(started)
			<-release
			return handler(ctx)
		})
		returned <- err
	}()
	<-started
	srv.Stop()
	close(release)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	sink.waitFinalQueued(t, before.ExecutionID) // its write failed
	down, err := execute(ctx, eng, secretInput(2), "", handler)
	if middleware.CodeOf(err) != middleware.CodeAuditUnavailable || ran != 1 {
		t.Fatalf("with PostgreSQL down a call must fail AUDIT_UNAVAILABLE and run nothing: %v, %d runs", err, ran)
	}
	sink.waitFinalQueued(t, down.ExecutionID)

	srv.Restart()
	// No call comes yet: the events kept are tried again on their own
	// (1, 2, 4, ... s after the sink's worker left), so the end of the call
	// that ran is written once the database is back.
	sink.waitWithin(t, before.ExecutionID, true, 40*time.Second)
	after, err := execute(ctx, eng, secretInput(3), "", handler)
	if err != nil || ran != 2 {
		t.Fatalf("once PostgreSQL is back, the same engine and sink must work again: %v, %d runs", err, ran)
	}
	if got, want := types(trail(t, pool, before.ExecutionID)), []string{"capability.requested", "capability.started", "capability.completed"}; !slices.Equal(got, want) {
		t.Errorf("the events of a call that ran are written once PostgreSQL is back: %v; want %v", got, want)
	}
	down1 := trail(t, pool, down.ExecutionID)
	if got, want := types(down1), []string{"capability.failed"}; !slices.Equal(got, want) || down1[0].Code == nil || *down1[0].Code != "AUDIT_UNAVAILABLE" {
		t.Errorf("the refused call's failure is written once it is back (its requested event was never recorded): %v", down1)
	}
	sink.waitFinal(t, after.ExecutionID)
	if got := types(trail(t, pool, after.ExecutionID)); len(got) != 3 {
		t.Errorf("the call after the restart: %v", got)
	}
	if st := auditStats(eng); st.Dropped != 0 {
		t.Errorf("no event was dropped: %+v", st)
	}
}

// auditStats is the delivery of eng's strict audit sink.
func auditStats(eng *middleware.Engine) middleware.SinkStats {
	for _, st := range eng.Stats().Sinks {
		if strings.HasPrefix(st.Sink, "audit:") {
			return st
		}
	}
	panic("the engine has no strict audit sink")
}

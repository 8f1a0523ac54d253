package agentsafepg_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// countingStore records the executions a store let consume an approval.
type countingStore struct {
	store.ApprovalStore
	consumed sync.Map // execution id → approval id
}

func (c *countingStore) Consume(ctx context.Context, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	got, err := c.ApprovalStore.Consume(ctx, id, req)
	if err == nil {
		c.consumed.Store(req.ExecutionID, id)
	}
	return got, err
}

// startMigrated starts a cluster of the test's own, with the schema.
func startMigrated(t *testing.T) *pgtest.Server {
	t.Helper()
	srv := pgtest.Start(t)
	pool := newPool(t, srv.URL())
	defer pool.Close()
	if err := agentsafepg.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return srv
}

// quickPool gives up on a dead server quickly.
func quickPool(t testing.TB, url string) *pgxpool.Pool {
	return newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.ConnectTimeout = time.Second })
}

// TestEngineFailsClosedWhenPostgresStops stops PostgreSQL (an immediate
// shutdown, as a crash) in the middle of a run: every call either ran after
// its approval was consumed or failed APPROVAL_UNAVAILABLE with nothing
// run; once PostgreSQL is back, the same engines and pools work again,
// without a restart of theirs.
func TestEngineFailsClosedWhenPostgresStops(t *testing.T) {
	ctx := t.Context()
	srv := startMigrated(t)
	const records, workers = 120, 16
	stores := make([]*countingStore, 2)
	engines := make([]*middleware.Engine, len(stores))
	for i := range stores {
		stores[i] = &countingStore{ApprovalStore: openApprovals(t, quickPool(t, srv.URL()))}
		engines[i] = newEngine(t, stores[i])
	}
	type job struct{ n, engine int }
	jobs := make(chan job, records*len(engines))
	ids := make([]string, records)
	for n := range ids {
		ids[n] = requestApproved(t, ctx, engines[0], refundInput(0, n))
		for e := range engines {
			jobs <- job{n, e}
		}
	}
	close(jobs)

	// Once a quarter of the records ran, handlers hold until PostgreSQL is
	// gone, so that calls are still coming when it stops.
	var ran sync.Map // execution id → approval id
	var runs atomic.Int64
	halfway, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	handler := func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if _, dup := ran.LoadOrStore(x.ID, x.Approval.ID); dup {
			t.Errorf("execution %s ran twice", x.ID)
		}
		if runs.Add(1) >= records/4 {
			once.Do(func() { close(halfway) })
			<-stopped
		}
		return "refunded", nil
	}
	type result struct {
		execution string
		code      middleware.Code
		err       error
	}
	results := make(chan result, records*len(engines))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				env, err := execute(ctx, engines[j.engine], refundInput(0, j.n), ids[j.n], handler)
				results <- result{env.ExecutionID, middleware.CodeOf(err), err}
			}
		})
	}
	<-halfway
	srv.Stop()
	close(stopped)
	wg.Wait()
	close(results)

	var completed, unavailable, consumedElsewhere int
	for r := range results {
		_, didRun := ran.Load(r.execution)
		switch {
		case r.err == nil && didRun:
			completed++
		case r.code == middleware.CodeApprovalUnavailable && !didRun:
			unavailable++
		case r.code == middleware.CodeApprovalConsumed && !didRun:
			consumedElsewhere++
		default:
			t.Errorf("execution %s: %v (handler ran: %v); want a run after a consumption, or APPROVAL_UNAVAILABLE with nothing run", r.execution, r.err, didRun)
		}
	}
	perRecord := make(map[string]int)
	ran.Range(func(exe, apr any) bool {
		perRecord[apr.(string)]++
		consumed := false
		for _, s := range stores {
			_, ok := s.consumed.Load(exe)
			consumed = consumed || ok
		}
		if !consumed {
			t.Errorf("execution %v ran without a consumption the store confirmed", exe)
		}
		return true
	})
	for _, s := range stores {
		s.consumed.Range(func(exe, _ any) bool {
			if _, ok := ran.Load(exe); !ok {
				t.Errorf("execution %v consumed an approval and did not run", exe)
			}
			return true
		})
	}
	for apr, n := range perRecord {
		if n > 1 {
			t.Errorf("approval %s ran %d times", apr, n)
		}
	}
	t.Logf("%d calls: %d completed, %d APPROVAL_CONSUMED, %d failed APPROVAL_UNAVAILABLE after PostgreSQL stopped; %d handler runs on %d records",
		records*len(engines), completed, consumedElsewhere, unavailable, len(perRecord), records)
	if completed < records/4 || unavailable == 0 {
		t.Fatalf("the run must straddle the stop: %d completed, %d unavailable", completed, unavailable)
	}

	srv.Restart()
	// The same engines, on the same pools, work again at once: the pools
	// dial the restarted server themselves, and the records survived.
	began := time.Now()
	for e, eng := range engines {
		in := refundInput(1, e)
		id := requestApproved(t, ctx, eng, in)
		env, err := execute(ctx, engines[1-e], in, id, handler)
		if err != nil || env.Status != middleware.StatusCompleted {
			t.Errorf("after PostgreSQL is back, engine %d must request, approve and resume again: %v", e, err)
		}
	}
	var resumed, cutOff int
	for n, id := range ids {
		if perRecord[id] > 0 {
			continue
		}
		env, err := execute(ctx, engines[n%2], refundInput(0, n), id, handler)
		switch code := middleware.CodeOf(err); {
		case err == nil && env.Status == middleware.StatusCompleted:
			resumed++
		case code == middleware.CodeApprovalConsumed:
			cutOff++
		default:
			t.Errorf("record %d, approved before the stop and not run: a resume after the restart got %v; want a run, or APPROVAL_CONSUMED for a consumption whose reply the stop cut off", n, err)
		}
	}
	t.Logf("after the restart: both engines worked again within %v; of the records approved before the stop and not run, %d ran now and %d stay consumed (a reply the stop cut off: in_doubt after the lease)",
		time.Since(began).Round(time.Millisecond), resumed, cutOff)
}

// TestStoreErrorsAreNotDecisions: with PostgreSQL down, every operation
// fails with an error the engine maps to APPROVAL_UNAVAILABLE.
func TestStoreErrorsAreNotDecisions(t *testing.T) {
	ctx := t.Context()
	srv := startMigrated(t)
	s := openApprovals(t, quickPool(t, srv.URL()))
	rec := approve(t, ctx, s, digestA)
	srv.Stop()
	_, err := s.Create(ctx, request(digestA))
	wantUnavailable(t, "Create", err)
	_, err = s.Get(ctx, rec.ID)
	wantUnavailable(t, "Get", err)
	_, _, err = s.Decide(ctx, rec.ID, decision(true, manager))
	wantUnavailable(t, "Decide", err)
	_, err = s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA))
	wantUnavailable(t, "Consume", err)
	wantUnavailable(t, "Release", s.Release(ctx, rec.ID, "exe_a"))
	wantUnavailable(t, "RecordOutcome", s.RecordOutcome(ctx, rec.ID, "exe_a", completed))
	_, err = s.List(ctx, store.ApprovalFilter{Audience: "orders", Tenant: "acme"})
	wantUnavailable(t, "List", err)
}

// request is a store-level approval request of the agent.
func request(digest string) store.ApprovalRequest {
	return store.ApprovalRequest{
		ID: store.NewApprovalID(), Audience: "orders", Procedure: refund, Type: "manager", Requester: agent,
		RequestedBy: "exe_requester", Digest: digest, View: "refund 120.00 EUR", Reasons: []string{"always"},
		SideEffect: "external", Risk: "high", ExpiresIn: 15 * time.Minute,
	}
}

// decision is a vote in the agent's audience.
func decision(approve bool, approver middleware.Actor) store.Decision {
	return store.Decision{Approve: approve, Approver: approver, Audience: "orders"}
}

// completed is the outcome of an execution that succeeded.
var completed = store.Outcome{Status: store.ApprovalCompleted, Code: "OK"}

func consumeReq(execution, digest string) store.ConsumeRequest {
	return store.ConsumeRequest{Audience: "orders", Procedure: refund, Type: "manager", Actor: agent, Digest: digest, ExecutionID: execution, Lease: time.Minute}
}

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// approve creates and approves a record of digest in s.
func approve(t testing.TB, ctx context.Context, s store.ApprovalStore, digest string) store.ApprovalRecord {
	t.Helper()
	rec, err := s.Create(ctx, request(digest))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, _, err := s.Decide(ctx, rec.ID, decision(true, manager)); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return rec
}

// sentinels are the store SPI's decision errors; every other error is a
// store failure.
var sentinels = []error{store.ErrApprovalNotFound, store.ErrApprovalPending, store.ErrApprovalRejected, store.ErrApprovalExpired,
	store.ErrApprovalConsumed, store.ErrApprovalInputMismatch, store.ErrApprovalResumeMismatch, store.ErrNotPending,
	store.ErrSelfApproval, store.ErrApproverNotAllowed, store.ErrTooManyPending}

// wantUnavailable fails unless err is a store failure: not one of the
// sentinels, so that the engine fails closed with APPROVAL_UNAVAILABLE.
func wantUnavailable(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil || slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
		t.Errorf("%s: got %v, want a store error that is no sentinel (APPROVAL_UNAVAILABLE)", what, err)
	}
}

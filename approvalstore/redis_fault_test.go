package approvalstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
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

// quickClient is a client that gives up on a dead server quickly: one dial
// attempt, one retry.
func quickClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, DialerRetries: 1, MaxRetries: 1,
		MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRedisEngineFailsClosedWhenRedisStops stops Redis in the middle of a
// run: every call either ran after its approval was consumed or failed
// APPROVAL_UNAVAILABLE with nothing run; once Redis is back (empty, as after
// a crash without persistence) the same engines work again.
func TestRedisEngineFailsClosedWhenRedisStops(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	const records, workers = 120, 16
	stores := make([]*countingStore, 2)
	engines := make([]*middleware.Engine, len(stores))
	prefix := newPrefix()
	for i := range stores {
		s, err := approvalstore.NewRedis(quickClient(t, srv.Addr()), approvalstore.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = &countingStore{ApprovalStore: s}
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

	// Once a quarter of the records ran, handlers hold until Redis is gone,
	// so that calls are still coming when it stops.
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

	var completed, unavailable int
	for r := range results {
		_, didRun := ran.Load(r.execution)
		switch {
		case r.err == nil && didRun:
			completed++
		case r.code == middleware.CodeApprovalUnavailable && !didRun:
			unavailable++
		case r.code == middleware.CodeApprovalConsumed && !didRun:
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
	t.Logf("%d calls completed, %d failed APPROVAL_UNAVAILABLE after Redis stopped", completed, unavailable)
	if completed < records/4 || unavailable == 0 {
		t.Fatalf("the run must straddle the stop: %d completed, %d unavailable", completed, unavailable)
	}

	srv.Restart()
	// A go-redis pool whose dials kept failing probes the server once a
	// second before it dials again: the client's reconnection, not the
	// store's. Wait for every engine's client, boundedly, before the
	// engines work across each other.
	for e, eng := range engines {
		probe := refundInput(2, e)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := execute(ctx, eng, probe, "", handler)
			if middleware.CodeOf(err) != middleware.CodeApprovalUnavailable || time.Now().After(deadline) {
				break
			}
		}
	}
	for e, eng := range engines {
		in := refundInput(1, e)
		id := requestApproved(t, ctx, eng, in)
		env, err := execute(ctx, engines[1-e], in, id, handler)
		if err != nil || env.Status != middleware.StatusCompleted {
			t.Errorf("after Redis is back, engine %d must request, approve and resume again: %v", e, err)
		}
	}
}

// TestRedisStoreErrorsAreNotDecisions: with Redis down, every operation
// fails with an error the engine maps to APPROVAL_UNAVAILABLE.
func TestRedisStoreErrorsAreNotDecisions(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := openRedis(t, quickClient(t, srv.Addr()))
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

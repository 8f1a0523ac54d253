package agentsafepg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// claimCounter records the executions a result store let claim a key.
type claimCounter struct {
	store.ResultStore
	claimed sync.Map // execution id → key
}

func (c *claimCounter) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	got, err := c.ResultStore.Claim(ctx, req)
	if err == nil && got.Status == store.ClaimAcquired {
		c.claimed.Store(req.ExecutionID, req.Key)
	}
	return got, err
}

// TestEngineResultsFailClosedWhenPostgresStops stops PostgreSQL (an
// immediate shutdown, as a crash) in the middle of a run of keyed calls:
// every handler run had a claim the store confirmed, every other call
// failed IDEMPOTENCY_UNAVAILABLE (or met its key in flight) with nothing
// run, and no key ran twice; once PostgreSQL is back, the same engines
// and pools claim and replay again, without a restart of theirs.
func TestEngineResultsFailClosedWhenPostgresStops(t *testing.T) {
	ctx := t.Context()
	srv := startMigrated(t)
	const ops, workers = 120, 16
	stores := make([]*claimCounter, 2)
	engines := make([]*middleware.Engine, len(stores))
	for i := range stores {
		stores[i] = &claimCounter{ResultStore: openResults(t, quickPool(t, srv.URL()))}
		engines[i] = newKeyedEngine(t, stores[i])
	}
	type job struct{ n, engine int }
	jobs := make(chan job, ops*len(engines))
	for n := range ops {
		for e := range engines {
			jobs <- job{n, e}
		}
	}
	close(jobs)

	// Once a quarter of the operations ran, handlers hold until PostgreSQL
	// is gone, so that calls are still coming when it stops.
	var ran sync.Map // execution id → caller key
	var runs atomic.Int64
	halfway, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	handler := func(key string) func(context.Context) (any, error) {
		return func(ctx context.Context) (any, error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			ran.Store(x.ID, key)
			if runs.Add(1) >= ops/4 {
				once.Do(func() { close(halfway) })
				<-stopped
			}
			return "refunded by " + x.ID, nil
		}
	}
	type result struct {
		execution string
		code      middleware.Code
		err       error
	}
	results := make(chan result, ops*len(engines))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				key := fmt.Sprintf("refund-0-%d", j.n)
				_, env, err := executeKeyed(ctx, engines[j.engine], refundInput(0, j.n), key, handler(key))
				results <- result{env.ExecutionID, middleware.CodeOf(err), err}
			}
		})
	}
	<-halfway
	srv.Stop()
	close(stopped)
	wg.Wait()
	close(results)

	var completed, unavailable, inFlight int
	for r := range results {
		_, didRun := ran.Load(r.execution)
		switch {
		case r.err == nil:
			completed++
		case r.code == middleware.CodeIdempotencyUnavailable && !didRun:
			unavailable++
		case r.code == middleware.CodeIdempotencyInFlight && !didRun:
			inFlight++
		default:
			t.Errorf("execution %s: %v (handler ran: %v); want a run, a replay, or IDEMPOTENCY_UNAVAILABLE with nothing run", r.execution, r.err, didRun)
		}
	}
	perKey := map[string]int{}
	ran.Range(func(exe, key any) bool {
		perKey[key.(string)]++
		claimed := false
		for _, s := range stores {
			_, ok := s.claimed.Load(exe)
			claimed = claimed || ok
		}
		if !claimed {
			t.Errorf("execution %v ran without a claim the store confirmed", exe)
		}
		return true
	})
	for key, n := range perKey {
		if n > 1 {
			t.Errorf("key %s ran %d times", key, n)
		}
	}
	t.Logf("%d calls: %d completed or replayed, %d IDEMPOTENCY_IN_FLIGHT, %d failed IDEMPOTENCY_UNAVAILABLE after PostgreSQL stopped; %d keys ran, each once",
		ops*len(engines), completed, inFlight, unavailable, len(perKey))
	if completed < ops/4 || unavailable == 0 {
		t.Fatalf("the run must straddle the stop: %d completed, %d unavailable", completed, unavailable)
	}

	srv.Restart()
	// The same engines, on the same pools, work again at once: the pools
	// dial the restarted server themselves, and the records survived.
	began := time.Now()
	for e, eng := range engines {
		key := fmt.Sprintf("refund-1-%d", e)
		_, first, err := executeKeyed(ctx, eng, refundInput(1, e), key, handler(key))
		if err != nil || first.Replayed {
			t.Errorf("after PostgreSQL is back, engine %d must claim and run again: %v", e, err)
		}
		_, again, err := executeKeyed(ctx, engines[1-e], refundInput(1, e), key, handler(key))
		if err != nil || !again.Replayed || again.ExecutionID != first.ExecutionID {
			t.Errorf("after PostgreSQL is back, engine %d must replay engine %d's result: %+v, %v", 1-e, e, again, err)
		}
	}
	// A key that ran before the stop is never run again: it replays, or
	// (its result lost with the stop) is in flight or in doubt.
	var replayed, unsettled int
	for n := range ops {
		key := fmt.Sprintf("refund-0-%d", n)
		if perKey[key] == 0 {
			continue
		}
		_, env, err := executeKeyed(ctx, engines[n%2], refundInput(0, n), key, handler(key))
		switch code := middleware.CodeOf(err); {
		case err == nil && env.Replayed:
			replayed++
		case code == middleware.CodeIdempotencyInFlight || code == middleware.CodeIdempotencyInDoubt:
			unsettled++
		default:
			t.Errorf("key %s, run before the stop: a repeat after the restart got %v (replayed %v); want a replay, in flight or in doubt", key, err, env.Replayed)
		}
	}
	after := map[string]int{}
	ran.Range(func(_, key any) bool {
		after[key.(string)]++
		return true
	})
	for key, n := range after {
		if n > 1 {
			t.Errorf("key %s ran %d times, before and after the restart", key, n)
		}
	}
	t.Logf("after the restart: both engines worked again within %v; of the keys run before the stop, %d replayed and %d are in flight or in doubt (a result the stop cut off)",
		time.Since(began).Round(time.Millisecond), replayed, unsettled)
}

// TestResultStoreErrorsAreNotDecisions: with PostgreSQL down, every method
// fails with an error that is no sentinel (IDEMPOTENCY_UNAVAILABLE).
func TestResultStoreErrorsAreNotDecisions(t *testing.T) {
	ctx := t.Context()
	srv := startMigrated(t)
	s := openResults(t, quickPool(t, srv.URL()))
	key := store.ResultKey{Owner: "own_0123456789abcdef0123456789abcdef", Key: "idk_0123456789abcdef0123456789abcdef"}
	srv.Stop()
	_, err := s.Claim(ctx, store.ClaimRequest{ResultKey: key, Digest: "sha256:00", ExecutionID: "exe_a", Lease: time.Minute, Retention: time.Hour})
	for what, err := range map[string]error{
		"Claim":       err,
		"Complete":    s.Complete(ctx, key, "exe_a", store.Result{ExecutionID: "exe_a", Code: "OK", Envelope: []byte("{}")}),
		"Release":     s.Release(ctx, key, "exe_a"),
		"MarkInDoubt": s.MarkInDoubt(ctx, key, "exe_a"),
	} {
		if err == nil || errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%s with PostgreSQL down: %v, want a store error", what, err)
		}
	}
	if _, err := s.Get(ctx, key); err == nil || errors.Is(err, store.ErrResultNotFound) {
		t.Errorf("Get with PostgreSQL down: %v, want a store error", err)
	}
}

package resultstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// The engine-level tests: calls with a caller's Idempotency-Key made
// through middleware.Engine, one engine per simulated server instance,
// each with its own Redis client, as a deployment has them.

const refund = "/orders.v1.Orders/Refund"

var agent = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}

var sealKey = middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}

// newEngine returns an engine whose only capability is an external
// refund; every call is the agent's, and results are kept in s.
func newEngine(t testing.TB, s store.ResultStore) *middleware.Engine {
	t.Helper()
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: 5 * time.Second})
	eng, err := middleware.New(reg,
		middleware.WithResultStore(s),
		middleware.WithResultKey(sealKey),
		middleware.WithAudience("orders"),
		middleware.WithProtoFiles(nil), // the procedure is invented: no descriptor
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// stringCodec stores the handler's string responses.
type stringCodec struct{}

func (stringCodec) Marshal(v any) ([]byte, error) {
	s, _ := v.(string)
	return []byte(s), nil
}

func (stringCodec) Unmarshal(b []byte) (any, error) { return string(b), nil }

func operation(round, n int) (adapter.Input, string) {
	return adapter.JSONInput(fmt.Appendf(nil, `{"order":%d,"round":%d,"amount":"120.00"}`, n, round)), fmt.Sprintf("refund-%d-%d", round, n)
}

// execute hands eng one refund call with the caller's key, as an adapter
// does.
func execute(ctx context.Context, eng *middleware.Engine, in adapter.Input, key string, attempt func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	return adapter.Execute(ctx, adapter.Resolve(eng, refund), adapter.Call[any]{Input: in, IdempotencyKey: key, Surface: adapter.SurfaceRPC, Codec: stringCodec{}}, attempt)
}

// ledger counts handler runs per caller key, and answers with the
// execution that ran.
type ledger struct {
	mu   sync.Mutex
	runs map[string][]string // caller key → executions
}

func (l *ledger) handler(key string) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		l.mu.Lock()
		l.runs[key] = append(l.runs[key], x.ID)
		l.mu.Unlock()
		return "refunded by " + x.ID, nil
	}
}

const (
	instances          = 8  // engines, each with its own Redis client
	workersPerInstance = 64 // goroutines per engine
	// contendersPerInstance is how many of an engine's goroutines send each
	// operation's key: every operation is raced by
	// instances·contendersPerInstance calls from all engines at once.
	contendersPerInstance = 8
)

// outcome tallies what the calls of a race got.
type outcome struct {
	ran, replayed, inFlight, unavailable atomic.Int64
}

// raceKeys races instances engines, workersPerInstance goroutines each, to
// call ops operations, each under its own caller key sent by
// instances·contendersPerInstance calls at once: every operation must run
// exactly once, every other call be a replay of that run, or
// IDEMPOTENCY_IN_FLIGHT (or, when faults is set, IDEMPOTENCY_UNAVAILABLE
// with nothing run).
func raceKeys(t *testing.T, rounds, ops int, client func() redis.UniversalClient, faults bool) {
	prefix := newPrefix()
	engines := make([]*middleware.Engine, instances)
	for i := range engines {
		engines[i] = newEngine(t, openRedisPrefix(t, client(), prefix))
	}
	ctx := t.Context()
	for round := range rounds {
		l := &ledger{runs: make(map[string][]string)}
		var o outcome
		var unexpected sync.Map
		results := make([]sync.Map, ops) // per operation: execution id → the response it was answered with
		start := make(chan struct{})
		var wg sync.WaitGroup
		stride := workersPerInstance / contendersPerInstance
		for e, eng := range engines {
			for w := range workersPerInstance {
				wg.Go(func() {
					<-start
					for n := w % stride; n < ops; n += stride {
						in, key := operation(round, n)
						v, env, err := execute(ctx, eng, in, key, l.handler(key))
						switch code := middleware.CodeOf(err); {
						case err == nil && env.Replayed:
							o.replayed.Add(1)
							results[n].Store(env.ExecutionID+"/replay/"+fmt.Sprint(e, w), v)
						case err == nil:
							o.ran.Add(1)
							results[n].Store(env.ExecutionID, v)
						case code == middleware.CodeIdempotencyInFlight:
							o.inFlight.Add(1)
						case code == middleware.CodeIdempotencyUnavailable && faults:
							o.unavailable.Add(1)
						default:
							unexpected.Store(fmt.Sprintf("engine %d worker %d operation %d", e, w, n), err)
						}
					}
				})
			}
		}
		began := time.Now()
		close(start)
		wg.Wait()
		calls := int64(ops * instances * contendersPerInstance)
		t.Logf("round %d: %d calls on %d keys from %d engines in %v: %d ran, %d replayed, %d in flight, %d unavailable",
			round, calls, ops, instances, time.Since(began).Round(time.Millisecond), o.ran.Load(), o.replayed.Load(), o.inFlight.Load(), o.unavailable.Load())

		unexpected.Range(func(k, v any) bool {
			t.Errorf("%s: %v, want a run, a replay or IDEMPOTENCY_IN_FLIGHT", k, v)
			return true
		})
		total := 0
		for n := range ops {
			_, key := operation(round, n)
			runs := l.runs[key]
			total += len(runs)
			if len(runs) > 1 {
				t.Errorf("round %d: operation %d ran %d times (%v): never a second run", round, n, len(runs), runs)
				continue
			}
			if len(runs) == 0 {
				continue
			}
			want := "refunded by " + runs[0]
			results[n].Range(func(k, v any) bool {
				if v != want {
					t.Errorf("round %d: operation %d answered %v (%s), want its one run's %q", round, n, v, k, want)
				}
				return true
			})
		}
		if total != ops || o.ran.Load() != int64(ops) || o.ran.Load()+o.replayed.Load()+o.inFlight.Load()+o.unavailable.Load() != calls {
			t.Fatalf("round %d: %d handler runs and %d calls that ran, of %d calls; want exactly %d runs", round, total, o.ran.Load(), calls, ops)
		}
	}
}

func openRedisPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) *resultstore.Redis {
	t.Helper()
	s, err := resultstore.NewRedis(rdb, resultstore.WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRedisEngineRunsEachKeyOnce: 8 engines × 64 goroutines send the same
// key for 200 distinct operations: exactly 200 handler runs; every other
// call is a replay of its operation's run, or IDEMPOTENCY_IN_FLIGHT.
// TestRedisCluster runs it on a Cluster too.
func TestRedisEngineRunsEachKeyOnce(t *testing.T) {
	srv := redistest.Start(t)
	raceKeys(t, 3, 200, func() redis.UniversalClient { return srv.Client() }, false)
}

// TestRedisEngineRunsEachKeyOnceWhenRepliesAreLost: the same race with
// go-redis retries off, through a proxy that loses every 97th reply (the
// command ran; the client cannot tell): the engine claims again for the
// same execution, so a lost reply never costs a second run.
func TestRedisEngineRunsEachKeyOnceWhenRepliesAreLost(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartFaultProxy(t, srv.Addr(), 97)
	// Store construction loads the scripts through the proxy too: load
	// them first, directly.
	if _, err := resultstore.NewRedis(srv.Client()); err != nil {
		t.Fatal(err)
	}
	raceKeys(t, 2, 200, func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, PoolSize: workersPerInstance})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, true)
	t.Logf("%d replies lost", proxy.Dropped())
	if proxy.Dropped() == 0 {
		t.Fatal("the proxy lost no reply: the test proved nothing")
	}
}

// countingStore records the executions a store let claim a key.
type countingStore struct {
	store.ResultStore
	claimed sync.Map // execution id → key
}

func (c *countingStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	got, err := c.ResultStore.Claim(ctx, req)
	if err == nil && got.Status == store.ClaimAcquired {
		c.claimed.Store(req.ExecutionID, req.Key)
	}
	return got, err
}

// quickClient gives up on a dead server quickly: one dial attempt, no
// retry.
func quickClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRedisEngineFailsClosedWhenRedisStops stops Redis in the middle of a
// run: every handler run had a claim the store confirmed, every other call
// failed IDEMPOTENCY_UNAVAILABLE (or met the key in flight) with nothing
// run; once Redis is back (empty, as after a crash without persistence)
// the same engines claim and replay again, without a restart.
func TestRedisEngineFailsClosedWhenRedisStops(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	const ops, workers = 120, 16
	prefix := newPrefix()
	stores := make([]*countingStore, 2)
	engines := make([]*middleware.Engine, len(stores))
	for i := range stores {
		stores[i] = &countingStore{ResultStore: openRedisPrefix(t, quickClient(t, srv.Addr()), prefix)}
		engines[i] = newEngine(t, stores[i])
	}
	type job struct{ n, engine int }
	jobs := make(chan job, ops*len(engines))
	for n := range ops {
		for e := range engines {
			jobs <- job{n, e}
		}
	}
	close(jobs)

	// Once a quarter of the operations ran, handlers hold until Redis is
	// gone, so that calls are still coming when it stops.
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
			return "refunded", nil
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
				in, key := operation(0, j.n)
				_, env, err := execute(ctx, engines[j.engine], in, key, handler(key))
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
		case r.err == nil:
			completed++
		case r.code == middleware.CodeIdempotencyUnavailable && !didRun:
			unavailable++
		case r.code == middleware.CodeIdempotencyInFlight && !didRun:
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
	t.Logf("%d calls completed or replayed, %d failed IDEMPOTENCY_UNAVAILABLE after Redis stopped", completed, unavailable)
	if completed < ops/4 || unavailable == 0 {
		t.Fatalf("the run must straddle the stop: %d completed, %d unavailable", completed, unavailable)
	}

	srv.Restart()
	// A go-redis pool whose dials kept failing probes the server once a
	// second before it dials again: the client's reconnection, not the
	// store's. Wait for every engine's client, boundedly.
	for e, eng := range engines {
		probe, probeKey := operation(2, e)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, _, err := execute(ctx, eng, probe, probeKey, handler(probeKey))
			if middleware.CodeOf(err) != middleware.CodeIdempotencyUnavailable || time.Now().After(deadline) {
				break
			}
		}
	}
	for e, eng := range engines {
		in, key := operation(1, e)
		_, first, err := execute(ctx, eng, in, key, handler(key))
		if err != nil || first.Replayed {
			t.Errorf("after Redis is back, engine %d must claim and run again: %v", e, err)
		}
		_, again, err := execute(ctx, engines[1-e], in, key, handler(key))
		if err != nil || !again.Replayed || again.ExecutionID != first.ExecutionID {
			t.Errorf("after Redis is back, engine %d must replay engine %d's result: %+v, %v", 1-e, e, again, err)
		}
	}
}

// TestRedisStoreErrorsAreNotDecisions: with Redis down, every method fails
// with an error that is no sentinel (IDEMPOTENCY_UNAVAILABLE).
func TestRedisStoreErrorsAreNotDecisions(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := openRedis(t, quickClient(t, srv.Addr()))
	key := store.ResultKey{Owner: "own_0123456789abcdef0123456789abcdef", Key: "idk_0123456789abcdef0123456789abcdef"}
	srv.Stop()
	_, err := s.Claim(ctx, store.ClaimRequest{ResultKey: key, Digest: "sha256:00", ExecutionID: "exe_a", Lease: time.Minute, Retention: time.Hour})
	for what, err := range map[string]error{
		"Claim":       err,
		"Complete":    s.Complete(ctx, key, "exe_a", store.Result{ExecutionID: "exe_a", Code: "OK", Envelope: []byte("{}")}),
		"Release":     s.Release(ctx, key, "exe_a"),
		"MarkInDoubt": s.MarkInDoubt(ctx, key, "exe_a"),
	} {
		if err == nil || err == store.ErrNotHeld {
			t.Errorf("%s with Redis down: %v, want a store error", what, err)
		}
	}
	if _, err := s.Get(ctx, key); err == nil || err == store.ErrResultNotFound {
		t.Errorf("Get with Redis down: %v, want a store error", err)
	}
}

// TestRedisCluster runs the Redis tests that matter on a 3-master
// Cluster, on one cluster: starting one takes a few seconds.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	t.Run("conformance", func(t *testing.T) { redisConformance(t, cl.Client()) })
	t.Run("engine runs each key once", func(t *testing.T) {
		raceKeys(t, 2, 200, func() redis.UniversalClient { return cl.Client() }, false)
	})
}

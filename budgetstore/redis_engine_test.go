package budgetstore_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/budgetrace"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// The exactness race: 8 engines × 64 callers, amounts of 1 to 5 against a
// limit of 100.
const (
	raceEngines = 8
	raceCallers = 64
	raceLimit   = 100
)

// race runs the exactness race with one store per engine on its own
// client from client, all under one prefix.
func race(t *testing.T, client func() redis.UniversalClient, calls int) (budgetrace.Race, budgetrace.Result) {
	t.Helper()
	prefix := newPrefix()
	r := budgetrace.Race{Callers: raceCallers, Calls: calls, Limit: raceLimit}
	for range raceEngines {
		r.Stores = append(r.Stores, openRedis(t, client(), budgetstore.WithKeyPrefix(prefix)))
	}
	return r, budgetrace.Run(t, r)
}

// TestRedisBudgetIsExactAcrossEngines: 8 engines × 64 callers on one
// Redis reserve random amounts against a limit of 100: what ran never
// passes it, it ends filled to within the largest amount, and Redis holds
// exactly the reservations of what ran; and on a 3-master Cluster.
func TestRedisBudgetIsExactAcrossEngines(t *testing.T) {
	srv := redistest.Start(t)
	r, res := race(t, func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 2)
	budgetrace.Check(t, r, res, false)
}

func TestRedisClusterBudgetIsExactAcrossEngines(t *testing.T) {
	cl := redistest.StartCluster(t)
	r, res := race(t, func() redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 2)
	budgetrace.Check(t, r, res, false)
}

// TestRedisBudgetIsExactWhenRepliesAreLost: the same race with go-redis
// retries off, through a proxy that loses every 20th reply (the command
// ran; the client cannot tell): the engine asks again for the same
// execution, so no reservation is taken twice, and an execution that
// gives up releases what a lost reply may have reserved.
func TestRedisBudgetIsExactWhenRepliesAreLost(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartFaultProxy(t, srv.Addr(), 0)
	prefix := newPrefix()
	r := budgetrace.Race{Callers: raceCallers, Calls: 2, Limit: raceLimit}
	for range raceEngines {
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		r.Stores = append(r.Stores, openRedis(t, c, budgetstore.WithKeyPrefix(prefix)))
	}
	proxy.Lose(20) // once the stores have loaded their scripts
	res := budgetrace.Run(t, r)
	t.Logf("%d replies lost; outcomes %v", proxy.Dropped(), res.Codes)
	if proxy.Dropped() == 0 {
		t.Fatal("the proxy lost no reply: the test proved nothing")
	}
	budgetrace.Check(t, r, res, false)
}

// TestRedisBudgetWindowRollsByRedisTime: two engines whose own clocks are
// an hour ahead and an hour behind share a budget on Redis; the window is
// judged by Redis TIME alone. A reservation counts until the window has
// passed on Redis's clock, and at the window plus a little it no longer
// does, whatever the instances' clocks say.
func TestRedisBudgetWindowRollsByRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	offset := &offsetClock{}
	prefix := newPrefix()
	const window = time.Hour
	budget := middleware.Budget{Name: "calls", Limit: 2, Window: window, Per: middleware.PerAudience}
	var engines []*middleware.Engine
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		s := openRedis(t, srv.Client(), budgetstore.WithKeyPrefix(prefix), budgetstore.WithClockOffset(offset.Offset))
		eng, err := middleware.New(middleware.NewRegistry().Register("send", middleware.Capability{SideEffect: middleware.SideEffectWrite, Budgets: []middleware.Budget{budget}}),
			middleware.WithBudgetStore(s), middleware.WithClock(func() time.Time { return time.Now().Add(skew) }), middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, eng)
	}
	call := func(eng *middleware.Engine) middleware.Envelope {
		_, env, _ := executeHTTP(t.Context(), eng, "send")
		return env
	}
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Fatalf("call within the limit: %+v", env.Error)
		}
	}
	if env := call(engines[1]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded || env.RetryAfter <= window-time.Minute || env.RetryAfter > window {
		t.Fatalf("a third call: %+v (RetryAfter %s), want BUDGET_EXCEEDED, retry in just under an hour by Redis's clock", env.Error, env.RetryAfter)
	}
	offset.Advance(window - time.Minute)
	if env := call(engines[0]); env.Error == nil || env.Error.Code != middleware.CodeBudgetExceeded {
		t.Fatalf("a minute before the window passed on Redis: %+v, want BUDGET_EXCEEDED", env.Error)
	}
	offset.Advance(time.Minute + 10*time.Millisecond)
	for _, eng := range engines {
		if env := call(eng); env.Error != nil {
			t.Errorf("the window passed on Redis's clock, yet %+v", env.Error)
		}
	}
}

// executeHTTP runs one governed call of procedure, with no input.
func executeHTTP(ctx context.Context, eng *middleware.Engine, procedure string) (any, middleware.Envelope, error) {
	return adapter.Execute(ctx, adapter.Resolve(eng, procedure), adapter.Call[any]{Surface: adapter.SurfaceHTTP},
		func(context.Context) (any, error) { return "sent", nil })
}

var discard = slog.New(slog.DiscardHandler)

// offsetClock is a clock offset a test moves forward; the Redis store adds
// it to Redis TIME.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Offset() time.Duration   { return time.Duration(c.d.Load()) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

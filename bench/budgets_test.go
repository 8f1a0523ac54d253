package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/redis/go-redis/v9"
)

// Budgets: what a budget adds to a governed call, and what a reservation
// costs on Redis.

const procSend = "/bench.v1.Orders/Send"

// budgetEngine is an engine with one write capability, with a call budget
// per actor on a memory store when budget is set (a limit no run reaches),
// and the same capability without one otherwise.
func budgetEngine(b testing.TB, budget bool) *middleware.Engine {
	c := middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second}
	opts := []middleware.Option{middleware.WithProtoFiles(nil), quiet}
	if budget {
		c.Budgets = []middleware.Budget{{Name: "sends", Limit: 1 << 62, Window: time.Millisecond, Per: "actor"}}
		opts = append(opts, middleware.WithBudgetStore(budgetstore.NewMemory()))
	}
	eng, err := middleware.New(middleware.NewRegistry().Register(procSend, c), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

func sendLoop(b *testing.B, eng *middleware.Engine) {
	ctx := context.Background()
	route := adapter.Resolve(eng, procSend)
	defer cpu(b)()
	for b.Loop() {
		v, _, err := adapter.Execute(ctx, route, adapter.Call[any]{}, noop)
		if err != nil {
			b.Fatal(err)
		}
		sink = v
	}
}

// BenchmarkBudget: one governed no-op write in process, with one call
// budget per actor on the memory store, against the same call without a
// budget (target: ≤ 1.15×).
func BenchmarkBudget(b *testing.B) {
	b.Run("impl=none", func(b *testing.B) { sendLoop(b, budgetEngine(b, false)) })
	b.Run("impl=budget", func(b *testing.B) { sendLoop(b, budgetEngine(b, true)) })
}

// connectBudgetClient serves the test service's Read over loopback
// HTTP/1.1, governed by an engine whose Read capability has one call
// budget per actor on the memory store when budget is set, and none
// otherwise.
func connectBudgetClient(b testing.TB, budget bool) testv1connect.TestServiceClient {
	c := middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Second}
	opts := []middleware.Option{quiet, middleware.WithBudgetStore(budgetstore.NewMemory())}
	if budget {
		c.Budgets = []middleware.Budget{{Name: "reads", Limit: 1 << 62, Window: time.Millisecond, Per: "actor"}}
	}
	eng, err := middleware.New(middleware.NewRegistry().Register(testv1connect.TestServiceReadProcedure, c).
		Register(testv1connect.TestServiceGatedProcedure, middleware.Capability{SideEffect: middleware.SideEffectWrite}), opts...)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(testv1connect.NewTestServiceHandler(connectRead{}, connect.WithInterceptors(connectadapter.NewInterceptor(eng))))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
}

func readLoop(b *testing.B, client testv1connect.TestServiceClient) {
	req := &testv1.Request{Id: "42"}
	ctx := context.Background()
	defer cpu(b)()
	for b.Loop() {
		if _, err := client.Read(ctx, connect.NewRequest(req)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBudgetConnect: the same over a real wire, a governed Connect
// call over loopback with and without a budget.
func BenchmarkBudgetConnect(b *testing.B) {
	b.Run("impl=none", func(b *testing.B) { readLoop(b, connectBudgetClient(b, false)) })
	b.Run("impl=budget", func(b *testing.B) { readLoop(b, connectBudgetClient(b, true)) })
}

// windowScript is the least script that does a reservation's work on
// Redis correctly: trim what aged out of the window (and take it off the
// sum), read the sum, check the limit, add the reservation and the new
// sum. It keeps none of the store's other promises: a repeat after a lost
// reply adds again, a refusal does not say when to retry, the keys have
// no TTL, and the sum and the reservations are two keys.
var windowScript = redis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local edge = now - tonumber(ARGV[2])
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', edge)
if #old > 0 then
  for i = 1, #old do
    total = total - tonumber(string.match(old[i], '|(%d+)$'))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', edge)
end
local amount = tonumber(ARGV[3])
if total + amount > tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[1] .. '|' .. ARGV[3])
redis.call('SET', KEYS[2], total + amount)
return 1`)

var reserveRound atomic.Int64

// reserveOp is the Redis store's Reserve of 1 on one budget key per round,
// each call a new execution; windowOp go-redis running windowScript the
// same way.
func reserveOp(ctx context.Context, s *budgetstore.Redis) func(i int) error {
	key := fmt.Sprintf("bgt_%016x%016x", 0, reserveRound.Add(1))
	return func(i int) error {
		_, err := s.Reserve(ctx, store.BudgetRequest{Key: key, ExecutionID: "exe_" + strconv.Itoa(i), Amount: 1, Limit: 1 << 50, Window: time.Hour})
		return err
	}
}

func windowOp(ctx context.Context, rdb redis.UniversalClient) func(i int) error {
	r := reserveRound.Add(1)
	keys := []string{fmt.Sprintf("win:{%d}:t", r), fmt.Sprintf("win:{%d}:a", r)}
	window := strconv.FormatInt(time.Hour.Microseconds(), 10)
	return func(i int) error {
		return windowScript.Run(ctx, rdb, keys, "exe_"+strconv.Itoa(i), window, 1, 1<<50).Err()
	}
}

// BenchmarkReserve: the Redis budget store's Reserve against go-redis
// running windowScript, at 1 and 64 concurrent callers (target: ≥ 0.8×
// the script's ops/s).
func BenchmarkReserve(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []int{1, 64} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: c})
		b.Cleanup(func() { _ = rdb.Close() })
		s, err := budgetstore.NewRedis(rdb)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range []string{"reserve", "script"} {
			b.Run(fmt.Sprintf("c=%d/impl=%s", c, impl), func(b *testing.B) {
				op := windowOp(b.Context(), rdb)
				if impl == "reserve" {
					op = reserveOp(b.Context(), s)
				}
				ops, err := claims(b.Context(), b.N, c, op)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(ops, "ops/s")
			})
		}
	}
}

// TestBudgetTargets measures the budgets' targets in one run, alternating
// the contenders for a few rounds (the machine is shared) and logging
// medians and ratios:
//   - a governed call with one budget on the memory store / the same call
//     without (≤ 1.15), time and CPU;
//   - the Redis Reserve / go-redis running windowScript, ops/s at 1 and 64
//     callers (≥ 0.8).
//
// A measurement, not a check: set AGENTSAFE_BENCH_BUDGETS=1 to run it.
//
//	AGENTSAFE_BENCH_BUDGETS=1 AGENTSAFE_REQUIRE_REDIS=1 go test -run TestBudgetTargets -v .
func TestBudgetTargets(t *testing.T) {
	if os.Getenv("AGENTSAFE_BENCH_BUDGETS") != "1" {
		t.Skip("a measurement: set AGENTSAFE_BENCH_BUDGETS=1 to run it")
	}
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("the targets need a real redis-server")
	}
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := budgetstore.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	none, budget := budgetEngine(t, false), budgetEngine(t, true)
	wireNone, wireBudget := connectBudgetClient(t, false), connectBudgetClient(t, true)
	measure := func(loop func(b *testing.B)) (ns, cpuNs float64) {
		r := testing.Benchmark(loop)
		return float64(r.T.Nanoseconds()) / float64(r.N), r.Extra["cpu-ns/op"]
	}
	const rounds = 9
	var times, cpus [4][]float64 // in process: none, budget; Connect: none, budget
	var rates [2][2][]float64    // c=1, c=64 × reserve, script (ops/s)
	var server [2][]float64      // Redis's own µs per script run: reserve, script
	loops := [4]func(b *testing.B){
		func(b *testing.B) { sendLoop(b, none) }, func(b *testing.B) { sendLoop(b, budget) },
		func(b *testing.B) { readLoop(b, wireNone) }, func(b *testing.B) { readLoop(b, wireBudget) },
	}
	for round := range rounds {
		for j := range loops {
			if round%2 == 1 { // alternate which of each pair goes first
				j ^= 1
			}
			ns, c := measure(loops[j])
			times[j], cpus[j] = append(times[j], ns), append(cpus[j], c)
		}
		for k, c := range []int{1, 64} {
			n := 4000 * c / min(c, 8)
			ops := [2]func(int) error{reserveOp(ctx, s), windowOp(ctx, rdb)}
			for j := range 2 {
				j = (j + round) % 2
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				rate, err := claims(ctx, n, c, ops[j])
				if err != nil {
					t.Fatal(err)
				}
				rates[k][j] = append(rates[k][j], rate)
				server[j] = append(server[j], scriptMicros(t, rdb))
			}
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	med := func(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
	t.Logf("governed no-op write in process: without a budget %.2f µs (%.2f µs CPU), with one budget on memory %.2f µs (%.2f µs CPU), medians of %d rounds",
		med(times[0])/1e3, med(cpus[0])/1e3, med(times[1])/1e3, med(cpus[1])/1e3, rounds)
	t.Logf("with a budget / without: time %.2f, CPU %.2f (target ≤ 1.15)", med(times[1])/med(times[0]), med(cpus[1])/med(cpus[0]))
	t.Logf("governed Connect Read over loopback: without a budget %.1f µs (%.1f µs CPU), with one %.1f µs (%.1f µs CPU): time %.2f, CPU %.2f (target ≤ 1.15)",
		med(times[2])/1e3, med(cpus[2])/1e3, med(times[3])/1e3, med(cpus[3])/1e3, med(times[3])/med(times[2]), med(cpus[3])/med(cpus[2]))
	for k, c := range []int{1, 64} {
		re, sc := med(rates[k][0]), med(rates[k][1])
		t.Logf("c=%-2d Redis Reserve %6.0f ops/s, go-redis window script %6.0f ops/s: Reserve / script = %.2f (target ≥ 0.8)", c, re, sc, re/sc)
	}
	t.Logf("Redis's own time per script (INFO commandstats): Reserve %.1f µs, window script %.1f µs: script / Reserve = %.2f",
		med(server[0]), med(server[1]), med(server[1])/med(server[0]))
}

// scriptMicros is Redis's own time per EVALSHA since the last CONFIG
// RESETSTAT, from INFO commandstats.
func scriptMicros(t *testing.T, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	return 0
}

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
	"github.com/redis/go-redis/v9"
)

// Caller keys and replay: what a repeat answered from a stored result
// costs, and what a claim costs on real Redis. The Redis benchmarks start
// their own redis-server (redis-server on PATH; without it, miniredis,
// whose figures mean nothing: set AGENTSAFE_REQUIRE_REDIS=1).

type connectWrite struct {
	testv1connect.UnimplementedTestServiceHandler
}

func (connectWrite) Write(_ context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return connect.NewResponse(&testv1.Response{Id: r.Msg.GetId(), Note: "refund ref-1"}), nil
}

var benchSealKey = middleware.ResultKey{ID: "bench", Key: []byte("0123456789abcdef0123456789abcdef")}

// writeServer serves Write over loopback HTTP/1.1: bare when results is
// nil, else governed by an engine that keeps results in it.
func writeServer(b testing.TB, results store.ResultStore) testv1connect.TestServiceClient {
	var opts []connect.HandlerOption
	if results != nil {
		eng, err := middleware.New(nil, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithResultStore(results), middleware.WithResultKey(benchSealKey))
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, connect.WithInterceptors(connectadapter.NewInterceptor(eng)))
	}
	mux := http.NewServeMux()
	mux.Handle(testv1connect.NewTestServiceHandler(connectWrite{}, opts...))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	return testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
}

// replayLoop calls Write under one key n times; every call after the
// first is a replay.
func replayLoop(b *testing.B, c testv1connect.TestServiceClient, key string) {
	ctx := context.Background()
	req := &testv1.Request{Id: "42"}
	call := func() {
		r := connect.NewRequest(req)
		if key != "" {
			r.Header().Set(adapter.HeaderIdempotencyKey, key)
		}
		res, err := c.Write(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if key != "" && res.Header().Get(adapter.HeaderReplayed) != "true" {
			b.Fatal("not a replay")
		}
	}
	if key != "" { // the first call runs and stores; the measured ones replay
		r := connect.NewRequest(req)
		r.Header().Set(adapter.HeaderIdempotencyKey, key)
		if _, err := c.Write(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		call()
	}
}

// minimalScript is one round trip of a check-then-write script on one
// hash: less than a claim must do (no clock, no lease, no expiry).
var minimalScript = redis.NewScript(`local st = redis.call('HGET', KEYS[1], 'state')
if st then return st end
redis.call('HSET', KEYS[1], 'state', 'in_flight', 'exec', ARGV[1])
return false`)

// BenchmarkReplay: a unary Connect call over loopback HTTP/1.1 that is
// answered from a stored result (the same Idempotency-Key every call),
// with the memory and the Redis result store, against the bare call; and
// one go-redis round trip (the minimal claim script), for "bare + one
// round trip".
func BenchmarkReplay(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	b.Run("server=bare", func(b *testing.B) { replayLoop(b, writeServer(b, nil), "") })
	b.Run("server=replay-memory", func(b *testing.B) { replayLoop(b, writeServer(b, resultstore.NewMemory()), "order-42") })
	b.Run("server=replay-redis", func(b *testing.B) {
		s, err := resultstore.NewRedis(rdb, resultstore.WithKeyPrefix(fmt.Sprintf("bench%d", time.Now().UnixNano())))
		if err != nil {
			b.Fatal(err)
		}
		replayLoop(b, writeServer(b, s), "order-42")
	})
	b.Run("server=redis-roundtrip", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := minimalScript.Run(ctx, rdb, []string{"bench:{rt}"}, "exe").Err(); err != nil && err != redis.Nil {
				b.Fatal(err)
			}
		}
	})
}

// equivalentScript is the least script that does what a claim does on a
// fresh key: read the record, Redis TIME, write the claim's fields (state,
// digest, execution, lease and end) and the key's TTL; none of the
// store's other cases (another digest, done, in doubt, reconcile).
var equivalentScript = redis.NewScript(`local r = redis.call('HMGET', KEYS[1], 'state', 'digest', 'exec')
if r[1] then return r end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease, ends = now + tonumber(ARGV[3]), now + tonumber(ARGV[3]) + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'in_flight', 'digest', ARGV[1], 'exec', ARGV[2], 'write_like', '1',
  'claimed_at', string.format('%.0f', now), 'lease_until', string.format('%.0f', lease), 'expires_at', string.format('%.0f', ends))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', (ends - now) / 1000 + 1000))
return false`)

// claims runs n claims of fresh keys (or the minimal script on fresh
// keys) from c goroutines and returns ops/s.
func claims(ctx context.Context, n, c int, op func(i int) error) (float64, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

var claimRound atomic.Int64

// claimOp is the Redis store's Claim of fresh keys; minimalOp go-redis
// running the minimal script on fresh keys.
func claimOp(ctx context.Context, s *resultstore.Redis) func(i int) error {
	r := claimRound.Add(1)
	return func(i int) error {
		// 100 callers, with a quota their claims count against but never
		// reach: every claim takes the acquiring path, counting included.
		key := store.ResultKey{Owner: fmt.Sprintf("own_%016x%016x", r, i%100), Key: fmt.Sprintf("idk_%016x%016x", r, i)}
		_, err := s.Claim(ctx, store.ClaimRequest{ResultKey: key, Digest: "sha256:bench", ExecutionID: fmt.Sprintf("exe_%d", i),
			Lease: time.Minute, WriteLike: true, Retention: time.Hour, Quota: store.ResultQuota{Records: 1 << 30, Bytes: 64 << 20}})
		return err
	}
}

// equivalentOp is go-redis running the equivalent script on fresh keys,
// with a claim's arguments.
func equivalentOp(ctx context.Context, rdb redis.UniversalClient) func(i int) error {
	r := claimRound.Add(1)
	lease, retention := strconv.FormatInt(time.Minute.Microseconds(), 10), strconv.FormatInt(time.Hour.Microseconds(), 10)
	return func(i int) error {
		err := equivalentScript.Run(ctx, rdb, []string{fmt.Sprintf("eq:{%d:%d}", r, i)}, "sha256:bench", fmt.Sprintf("exe_%d", i), lease, retention).Err()
		if err == redis.Nil {
			return nil
		}
		return err
	}
}

func minimalOp(ctx context.Context, rdb redis.UniversalClient) func(i int) error {
	r := claimRound.Add(1)
	return func(i int) error {
		err := minimalScript.Run(ctx, rdb, []string{fmt.Sprintf("min:{%d:%d}", r, i)}, fmt.Sprintf("exe_%d", i)).Err()
		if err == redis.Nil {
			return nil
		}
		return err
	}
}

// BenchmarkClaim: the Redis result store's Claim of fresh keys (the
// acquiring path: read, TIME, write, TTL) against go-redis running the
// equivalent script and the minimal check-then-write one, at 1 and 64
// concurrent callers.
func BenchmarkClaim(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []int{1, 64} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: c})
		b.Cleanup(func() { _ = rdb.Close() })
		s, err := resultstore.NewRedis(rdb)
		if err != nil {
			b.Fatal(err)
		}
		for name, op := range map[string]func() func(int) error{
			"impl=claim":      func() func(int) error { return claimOp(b.Context(), s) },
			"impl=equivalent": func() func(int) error { return equivalentOp(b.Context(), rdb) },
			"impl=minimal":    func() func(int) error { return minimalOp(b.Context(), rdb) },
		} {
			b.Run(fmt.Sprintf("c=%d/%s", c, name), func(b *testing.B) {
				ops, err := claims(b.Context(), b.N, c, op())
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(ops, "ops/s")
			})
		}
	}
}

// TestResultTargets measures the targets of caller keys and replay in one
// run, alternating the contenders for a few rounds (the machine is
// shared) and logging medians and ratios:
//   - a replayed Connect call with the memory store / the bare call (≤ 1.2);
//   - with the Redis store / (the bare call + one go-redis round trip) (≤ 1.2);
//   - the Redis claim / go-redis running the equivalent script, ops/s
//     (≥ 0.8); and, for reference, / the minimal check-then-write script.
//
// A measurement, not a check: set AGENTSAFE_BENCH_RESULTS=1 to run it.
//
//	AGENTSAFE_BENCH_RESULTS=1 AGENTSAFE_REQUIRE_REDIS=1 go test -run TestResultTargets -v .
func TestResultTargets(t *testing.T) {
	if os.Getenv("AGENTSAFE_BENCH_RESULTS") != "1" {
		t.Skip("a measurement: set AGENTSAFE_BENCH_RESULTS=1 to run it")
	}
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("the targets need a real redis-server")
	}
	ctx := t.Context()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := resultstore.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	bare, memory, viaRedis := writeServer(t, nil), writeServer(t, resultstore.NewMemory()), writeServer(t, s)
	nsPerOp := func(f func(b *testing.B)) float64 {
		r := testing.Benchmark(f)
		return float64(r.T.Nanoseconds()) / float64(r.N)
	}
	const rounds = 7
	var times [4][]float64    // bare, replay-memory, replay-redis, redis round trip (ns/op)
	var rates [2][3][]float64 // c=1, c=64 × claim, equivalent, minimal (ops/s)
	for range rounds {
		times[0] = append(times[0], nsPerOp(func(b *testing.B) { replayLoop(b, bare, "") }))
		times[1] = append(times[1], nsPerOp(func(b *testing.B) { replayLoop(b, memory, "order-42") }))
		times[2] = append(times[2], nsPerOp(func(b *testing.B) { replayLoop(b, viaRedis, "order-42") }))
		times[3] = append(times[3], nsPerOp(func(b *testing.B) {
			for b.Loop() {
				if err := minimalScript.Run(ctx, rdb, []string{"bench:{rt}"}, "exe").Err(); err != nil && err != redis.Nil {
					b.Fatal(err)
				}
			}
		}))
		for k, c := range []int{1, 64} {
			n := 5000 * c / min(c, 8)
			ops := [3]func(int) error{claimOp(ctx, s), equivalentOp(ctx, rdb), minimalOp(ctx, rdb)}
			first := len(rates[k][0]) % 3 // rotate which goes first
			for j := range 3 {
				j = (j + first) % 3
				rate, err := claims(ctx, n, c, ops[j])
				if err != nil {
					t.Fatal(err)
				}
				rates[k][j] = append(rates[k][j], rate)
			}
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	med := func(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
	b, m, r, rt := med(times[0]), med(times[1]), med(times[2]), med(times[3])
	t.Logf("Connect Write over loopback: bare %.1f µs, replay (memory) %.1f µs, replay (Redis) %.1f µs; go-redis round trip %.1f µs (medians of %d rounds)",
		b/1e3, m/1e3, r/1e3, rt/1e3, rounds)
	t.Logf("replay (memory) / bare = %.2f (target ≤ 1.2); replay (Redis) / (bare + round trip) = %.2f (target ≤ 1.2)", m/b, r/(b+rt))
	for k, c := range []int{1, 64} {
		cl, eq, mi := med(rates[k][0]), med(rates[k][1]), med(rates[k][2])
		t.Logf("c=%-2d Redis claim %6.0f ops/s, go-redis equivalent script %6.0f ops/s, minimal script %6.0f ops/s: claim / equivalent = %.2f (target ≥ 0.8), claim / minimal = %.2f",
			c, cl, eq, mi, cl/eq, cl/mi)
	}
}

package approvalstore_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
)

// BenchmarkConsume measures the Redis store's Consume alone (the engine's
// other work is not in it) on fresh approved records, at 1 and 64
// concurrent callers, reporting throughput and latency percentiles.
// TestConsumeCeiling compares it with redis-benchmark.
func BenchmarkConsume(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: c})
			b.Cleanup(func() { _ = rdb.Close() })
			s := openRedis(b, rdb)
			ids, err := approvalstore.SeedApproved(b.Context(), s, request(digestA), manager, b.N)
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC() // the seeding's garbage is not Consume's
			b.ResetTimer()
			r := consumeAll(b.Context(), s, ids, c)
			b.StopTimer()
			if r.err != nil {
				b.Fatal(r.err)
			}
			b.ReportMetric(r.opsPerSec(), "ops/s")
			b.ReportMetric(r.percentile(50), "p50-µs")
			b.ReportMetric(r.percentile(99), "p99-µs")
		})
	}
}

// run is the result of consuming records at a concurrency.
type run struct {
	elapsed   time.Duration
	latencies []time.Duration // sorted
	err       error
}

func (r run) opsPerSec() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

// percentile returns the p-th percentile latency in microseconds.
func (r run) percentile(p int) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	i := min(len(r.latencies)*p/100, len(r.latencies)-1)
	return float64(r.latencies[i]) / float64(time.Microsecond)
}

// consumeAll consumes every record of ids, from c goroutines.
func consumeAll(ctx context.Context, s *approvalstore.Redis, ids []string, c int) run {
	return timed(len(ids), c, func(i int) error {
		_, err := s.Consume(ctx, ids[i], consumeReq(fmt.Sprintf("exe_%d", i), digestA))
		return err
	})
}

// timed runs op(0) … op(n-1) from c goroutines, timing each.
func timed(n, c int, op func(i int) error) run {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				t := time.Now()
				err := op(i)
				lat[i] = time.Since(t)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	r := run{elapsed: time.Since(start), latencies: lat}
	slices.Sort(r.latencies)
	if err, ok := firstErr.Load().(error); ok {
		r.err = err
	}
	return r
}

// ceilingScript is the least a consumption can be: one round trip of a
// check-then-write script on one hash.
const ceilingScript = `local st = redis.call('HGET', KEYS[1], 'status')
if st == 'consumed' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'consumed', 'consumed_by', ARGV[1])
return 1`

// TestConsumeCeiling compares the store's Consume with the ceiling of one
// round trip: redis-benchmark running an EVALSHA of a minimal
// check-then-write script, at the same concurrency against the same server.
// In between it runs the same minimal script through go-redis, which tells
// the client's share of the gap from the store's. The three alternate for
// a few rounds (machines are shared) and the medians are logged. A
// measurement, not a check: set AGENTSAFE_BENCH_REDIS=1 to run it.
//
//	AGENTSAFE_BENCH_REDIS=1 go test ./approvalstore/ -run ConsumeCeiling -v
func TestConsumeCeiling(t *testing.T) {
	if os.Getenv("AGENTSAFE_BENCH_REDIS") != "1" {
		t.Skip("a measurement: set AGENTSAFE_BENCH_REDIS=1 to run it")
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark is not on PATH (apt-get install redis-tools)")
	}
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("the ceiling needs a real redis-server")
	}
	ctx := t.Context()
	ceilingSc := redis.NewScript(ceilingScript)
	host, port, _ := strings.Cut(srv.Addr(), ":")
	const rounds = 5
	for _, tc := range []struct{ c, n int }{{1, 10000}, {64, 40000}} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: tc.c})
		s := openRedis(t, rdb)
		var results [3][4][]float64 // redis-benchmark, go-redis, Consume × ops/s, p50, p99, µs inside Redis per call
		add := func(k int, rps, p50, p99 float64) {
			results[k][0], results[k][1], results[k][2] = append(results[k][0], rps), append(results[k][1], p50), append(results[k][2], p99)
			results[k][3] = append(results[k][3], serverMicros(t, ctx, rdb))
		}
		for round := range rounds {
			ids, err := approvalstore.SeedApproved(ctx, s, request(digestA), manager, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC() // the seeding's garbage is nobody's
			if err := ceilingSc.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
			resetStats(t, ctx, rdb)
			out, err := exec.CommandContext(ctx, bench, "-h", host, "-p", port, "-c", strconv.Itoa(tc.c), "-n", strconv.Itoa(tc.n),
				"-r", "100000000", "--csv", "EVALSHA", ceilingSc.Hash(), "1", "ceiling:{__rand_int__}", "exe").CombinedOutput()
			if err != nil {
				t.Fatalf("redis-benchmark: %v\n%s", err, out)
			}
			rps, p50, p99 := parseBenchmarkCSV(t, out)
			add(0, rps, p50, p99)

			resetStats(t, ctx, rdb)
			r := timed(tc.n, tc.c, func(i int) error {
				return ceilingSc.Run(ctx, rdb, []string{fmt.Sprintf("go:{%d:%d}", round, i)}, "exe").Err()
			})
			if r.err != nil {
				t.Fatal(r.err)
			}
			add(1, r.opsPerSec(), r.percentile(50), r.percentile(99))

			resetStats(t, ctx, rdb)
			r = consumeAll(ctx, s, ids, tc.c)
			if r.err != nil {
				t.Fatal(r.err)
			}
			add(2, r.opsPerSec(), r.percentile(50), r.percentile(99))
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_ = rdb.Close()
		for k, name := range []string{"redis-benchmark, minimal check-then-write", "go-redis, the same script", "approvalstore.Redis.Consume"} {
			t.Logf("c=%-2d %-42s %6.0f ops/s  p50 %5.0f µs  p99 %6.0f µs  %4.1f µs in Redis per call  (ops/s per round %v)",
				tc.c, name, median(results[k][0]), median(results[k][1]), median(results[k][2]), median(results[k][3]), rounded(results[k][0]))
		}
		t.Logf("c=%-2d Consume / redis-benchmark %.2f; Consume / go-redis %.2f; go-redis / redis-benchmark %.2f", tc.c,
			median(results[2][0])/median(results[0][0]), median(results[2][0])/median(results[1][0]), median(results[1][0])/median(results[0][0]))
	}
}

// resetStats zeroes the server's command statistics.
func resetStats(t *testing.T, ctx context.Context, rdb *redis.Client) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// serverMicros reads the time Redis spent per EVALSHA since resetStats:
// the script's own cost, apart from the client's and the network's.
func serverMicros(t *testing.T, ctx context.Context, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	return 0
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// parseBenchmarkCSV reads requests per second and the p50 and p99
// latencies (µs) from redis-benchmark --csv.
func parseBenchmarkCSV(t *testing.T, out []byte) (rps, p50, p99 float64) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("redis-benchmark output: %v\n%s", err, out)
	}
	col := func(name string) float64 {
		i := slices.Index(rows[0], name)
		if i < 0 {
			t.Fatalf("redis-benchmark output has no %s column:\n%s", name, out)
		}
		v, err := strconv.ParseFloat(rows[1][i], 64)
		if err != nil {
			t.Fatalf("redis-benchmark %s: %v", name, err)
		}
		return v
	}
	return col("rps"), col("p50_latency_ms") * 1000, col("p99_latency_ms") * 1000
}

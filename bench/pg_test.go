package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The approval store's Consume on PostgreSQL against the least a
// consumption can be there: one bare conditional UPDATE … RETURNING on the
// same table, through the same driver (pgx), in the same run. Both need a
// server: set AGENTSAFE_BENCH_POSTGRES to the address of a database the
// benchmark may write to (./pg.sh starts a throwaway cluster and runs
// them).
//
//	AGENTSAFE_BENCH_POSTGRES=postgres://… go test -run PostgresConsume -v .
//	AGENTSAFE_BENCH_POSTGRES=postgres://… go test -run '^$' -bench PostgresConsume -benchtime 5000x -count 6 . | benchstat -col /impl -

const pgEnv = "AGENTSAFE_BENCH_POSTGRES"

// pgRequest is the approval every seeded record is for.
var pgRequest = store.ConsumeRequest{
	Audience: "orders", Procedure: "/bench.v1.Orders/Refund", Type: "manager", Quorum: 1,
	Actor:  store.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}},
	Digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	Lease:  time.Minute,
}

// bareConsume is the baseline: one conditional UPDATE … RETURNING that
// flips an approved record to consumed.
const bareConsume = `UPDATE agentsafe.approvals SET status = 'consumed', consumed_by = $2
	WHERE id = $1 AND status = 'approved' RETURNING approver_id`

// pgBench is a migrated database and a pool of c connections on it.
type pgBench struct {
	pool  *pgxpool.Pool
	store *agentsafepg.ApprovalStore
}

func openPGBench(tb testing.TB, c int) *pgBench {
	tb.Helper()
	url := os.Getenv(pgEnv)
	if url == "" {
		tb.Skipf("a measurement on a real PostgreSQL: set %s to a database's address (bench/pg.sh starts one)", pgEnv)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = int32(c), int32(c)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if err := agentsafepg.Migrate(context.Background(), pool); err != nil {
		tb.Fatal(err)
	}
	s, err := agentsafepg.NewApprovalStore(pool)
	if err != nil {
		tb.Fatal(err)
	}
	return &pgBench{pool: pool, store: s}
}

// seed writes n approved records of pgRequest and returns their ids: one
// through the store (Create, then Decide), copied n times in one
// statement with fresh ids.
func (p *pgBench) seed(tb testing.TB, n int) []string {
	tb.Helper()
	ctx := context.Background()
	tmpl, err := p.store.Create(ctx, store.ApprovalRequest{
		ID: store.NewApprovalID(), Audience: pgRequest.Audience, Procedure: pgRequest.Procedure, Type: pgRequest.Type,
		Requester: pgRequest.Actor, RequestedBy: "exe_requester", Digest: pgRequest.Digest, View: "refund 120.00 EUR",
		SideEffect: "external", Risk: "high", ExpiresIn: 15 * time.Minute,
	})
	if err != nil {
		tb.Fatal(err)
	}
	if _, _, err := p.store.Decide(ctx, tmpl.ID, store.Decision{Approve: true, Audience: pgRequest.Audience,
		Approver: store.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}}); err != nil {
		tb.Fatal(err)
	}
	rows, err := p.pool.Query(ctx, `INSERT INTO agentsafe.approvals
		SELECT (jsonb_populate_record(a, jsonb_build_object('id', 'apr_' || md5(random()::text || i)))).*
		FROM agentsafe.approvals a, generate_series(1, $2::int) i WHERE a.id = $1
		RETURNING id`, tmpl.ID, n)
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != n {
		tb.Fatalf("seeded %d records of %d: %v", len(ids), n, err)
	}
	// Collect the seeding's dead rows and refresh the statistics, so that
	// neither side pays for the other's garbage.
	if _, err := p.pool.Exec(ctx, "VACUUM ANALYZE agentsafe.approvals"); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// pgImpls are the two ways to consume record id as execution exe.
var pgImpls = []struct {
	name    string
	consume func(ctx context.Context, p *pgBench, id, exe string) error
}{
	{"bare", func(ctx context.Context, p *pgBench, id, exe string) error {
		var approver string
		return p.pool.QueryRow(ctx, bareConsume, id, exe).Scan(&approver)
	}},
	{"agentsafepg", func(ctx context.Context, p *pgBench, id, exe string) error {
		req := pgRequest
		req.ExecutionID = exe
		_, err := p.store.Consume(ctx, id, req)
		return err
	}},
}

// BenchmarkPostgresConsume consumes fresh approved records with the bare
// UPDATE and with the store, at 1 and 64 concurrent callers.
func BenchmarkPostgresConsume(b *testing.B) {
	for _, c := range []int{1, 64} {
		for _, impl := range pgImpls {
			b.Run(fmt.Sprintf("c=%d/impl=%s", c, impl.name), func(b *testing.B) {
				p := openPGBench(b, c)
				ids := p.seed(b, b.N)
				runtime.GC()
				b.ResetTimer()
				r := pgTimed(len(ids), c, func(i int) error { return impl.consume(context.Background(), p, ids[i], fmt.Sprintf("exe_%d", i)) })
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
}

// TestPostgresConsumeRatio measures the store's Consume against the bare
// UPDATE at 1 and 64 concurrent callers: on one seeded table, the two take
// turns in short slices (4 calls at c=1, 1000 at c=64: machines are shared,
// and a noisy neighbour then slows both alike), and the ratio is that of
// their total throughput. The
// store is meant to keep at least 0.8 of the bare statement's.
func TestPostgresConsumeRatio(t *testing.T) {
	for _, tc := range []struct{ c, slices, n int }{{1, 1000, 4}, {64, 20, 1000}} {
		p := openPGBench(t, tc.c)
		slices := tc.slices
		ids := p.seed(t, slices*len(pgImpls)*tc.n)
		var elapsed [2]time.Duration
		var lat [2][]time.Duration
		var perSlice [2][]float64
		runtime.GC() // the seeding's garbage is nobody's
		for s := range slices {
			for k, impl := range pgImpls {
				part := ids[(s*len(pgImpls)+k)*tc.n:][:tc.n]
				r := pgTimed(tc.n, tc.c, func(i int) error { return impl.consume(t.Context(), p, part[i], fmt.Sprintf("exe_%s", part[i])) })
				if r.err != nil {
					t.Fatal(r.err)
				}
				elapsed[k] += r.elapsed
				lat[k] = append(lat[k], r.latencies...)
				perSlice[k] = append(perSlice[k], r.opsPerSec())
			}
		}
		for k, impl := range pgImpls {
			slicesSort(lat[k])
			r := pgRun{elapsed: elapsed[k], latencies: lat[k]}
			t.Logf("c=%-2d %-12s %7.0f ops/s  p50 %6.0f µs  p99 %6.0f µs  (ops/s per slice, median %.0f)",
				tc.c, impl.name, r.opsPerSec(), r.percentile(50), r.percentile(99), pgMedian(perSlice[k]))
		}
		slicesSort(lat[0])
		slicesSort(lat[1])
		t.Logf("c=%-2d agentsafepg Consume / bare UPDATE … RETURNING: %.2f of its throughput (target ≥ 0.8), %.2f of its median latency",
			tc.c, elapsed[0].Seconds()/elapsed[1].Seconds(), float64(lat[0][len(lat[0])/2])/float64(lat[1][len(lat[1])/2]))
		if _, err := p.pool.Exec(t.Context(), "TRUNCATE agentsafe.approvals"); err != nil {
			t.Fatal(err)
		}
	}
}

// pgRun is the result of consuming records at a concurrency.
type pgRun struct {
	elapsed   time.Duration
	latencies []time.Duration // sorted
	err       error
}

func (r pgRun) opsPerSec() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

// percentile returns the p-th percentile latency in microseconds.
func (r pgRun) percentile(p int) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	i := min(len(r.latencies)*p/100, len(r.latencies)-1)
	return float64(r.latencies[i]) / float64(time.Microsecond)
}

// pgTimed runs op(0) … op(n-1) from c goroutines, timing each.
func pgTimed(n, c int, op func(i int) error) pgRun {
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
	r := pgRun{elapsed: time.Since(start), latencies: lat}
	slices.Sort(r.latencies)
	if err, ok := firstErr.Load().(error); ok {
		r.err = err
	}
	return r
}

func slicesSort(ds []time.Duration) { slices.Sort(ds) }

func pgMedian(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

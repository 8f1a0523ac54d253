package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

const procWrite = "/bench.v1.Orders/Refund"

// slowAudit is a strict audit sink whose every write, one record or a
// batch, takes delay (SPEC §8's yardstick: a database a few milliseconds
// away). It counts its writes and records.
type slowAudit struct {
	delay            time.Duration
	writes, recorded atomic.Int64
}

func (s *slowAudit) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

func (s *slowAudit) RecordBatch(_ context.Context, events []middleware.Event) error {
	time.Sleep(s.delay)
	s.writes.Add(1)
	s.recorded.Add(int64(len(events)))
	return nil
}

// recordOnly hides RecordBatch: the engine then writes one record a call.
type recordOnly struct{ s *slowAudit }

func (r recordOnly) Record(ctx context.Context, e middleware.Event) error { return r.s.Record(ctx, e) }

// BenchmarkStrictAudit: 64 concurrent callers make governed write calls
// through an engine whose strict audit sink takes 5 ms for every write
// (capability.requested and .started are recorded before the call goes
// on, its final event after). sink=batch implements
// middleware.BatchAuditSink, so the records waiting for the sink are
// written together (group commit); sink=record implements only Record,
// one record a write. bound is WithAuditSink's (1s is the default). One
// op is one call; the figures are calls/s (calls completed per second of
// wall time), %completed (of the calls made) and writes/call (sink writes
// per completed call). A caller whose call is refused waits 10 ms before
// the next, as a client backing off would.
func BenchmarkStrictAudit(b *testing.B) {
	const callers = 64
	for _, bound := range []time.Duration{time.Second, 300 * time.Millisecond} {
		for _, batch := range []bool{true, false} {
			name := "record"
			if batch {
				name = "batch"
			}
			b.Run(fmt.Sprintf("bound=%s/sink=%s", bound, name), func(b *testing.B) {
				audit := &slowAudit{delay: 5 * time.Millisecond}
				var sinkOpt middleware.AuditSink = recordOnly{audit}
				if batch {
					sinkOpt = audit
				}
				eng, err := middleware.New(middleware.NewRegistry().Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite}),
					middleware.WithProtoFiles(nil), quiet, middleware.WithAuditSink(sinkOpt, bound))
				if err != nil {
					b.Fatal(err)
				}
				route := adapter.Resolve(eng, procWrite)
				call := func() error {
					_, _, err := adapter.Execute(context.Background(), route, adapter.Call[any]{}, noop)
					return err
				}
				// The sink's pace is learned from its writes: one call first.
				if err := call(); err != nil {
					b.Fatal(err)
				}
				writes := audit.writes.Load()
				var next, completed atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				done := cpu(b)
				start := time.Now()
				for range callers {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := call(); err != nil {
								time.Sleep(10 * time.Millisecond)
								continue
							}
							completed.Add(1)
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				done()
				b.ReportMetric(float64(completed.Load())/elapsed.Seconds(), "calls/s")
				b.ReportMetric(100*float64(completed.Load())/float64(b.N), "%completed")
				if c := completed.Load(); c > 0 {
					b.ReportMetric(float64(audit.writes.Load()-writes)/float64(c), "writes/call")
				}
			})
		}
	}
}

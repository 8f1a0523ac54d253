package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
)

// connectServer serves the test service over loopback HTTP/1.1, bare or
// with the agentsafe interceptor, and a client that keeps a connection
// per concurrent caller.
func connectServer(b testing.TB, governed bool, handler testv1connect.TestServiceHandler) (testv1connect.TestServiceClient, func()) {
	var opts []connect.HandlerOption
	if governed {
		opts = append(opts, connect.WithInterceptors(connectadapter.NewInterceptor(optionsEngine(b))))
	}
	mux := http.NewServeMux()
	mux.Handle(testv1connect.NewTestServiceHandler(handler, opts...))
	srv := httptest.NewServer(mux)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	client := testv1connect.NewTestServiceClient(&http.Client{Transport: tr}, srv.URL)
	return client, func() { tr.CloseIdleConnections(); srv.Close() }
}

// BenchmarkConnectLoad is the load curve: unary Connect calls over
// loopback from c concurrent callers, bare and governed, reporting the
// median and 99th percentile latency of the calls (p50-µs, p99-µs) and
// allocations per call; ns/op is the wall time per call at that
// concurrency (its inverse is the throughput). Run with -count ≥ 6: the
// servers alternate within each count.
func BenchmarkConnectLoad(b *testing.B) {
	for _, c := range []int{1, 8, 64, 256} {
		for _, impl := range []string{"bare", "agentsafe"} {
			b.Run(fmt.Sprintf("c=%d/server=%s", c, impl), func(b *testing.B) {
				client, stop := connectServer(b, impl == "agentsafe", connectRead{})
				defer stop()
				ctx := context.Background()
				req := &testv1.Request{Id: "42"}
				call := func() error { _, err := client.Read(ctx, connect.NewRequest(req)); return err }
				warm(b, c, call) // connections open, workers parked
				b.ResetTimer()
				done := cpu(b)
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				for range c {
					wg.Go(func() {
						for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
							t := time.Now()
							if err := call(); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				done()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(lat[min(len(lat)*99/100, len(lat)-1)].Nanoseconds())/1e3, "p99-µs")
			})
		}
	}
}

// warm makes c concurrent calls a few times over, so that the timed run
// starts with its connections open.
func warm(b *testing.B, c int, call func() error) {
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for range 3 {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// blockingRead holds every call in its handler until release is closed,
// counting the calls it holds.
type blockingRead struct {
	testv1connect.UnimplementedTestServiceHandler
	held    sync.WaitGroup
	release chan struct{}
}

func (h *blockingRead) Read(_ context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	h.held.Done()
	<-h.release
	return connect.NewResponse(&testv1.Response{Id: r.Msg.GetId()}), nil
}

// TestHeapPerInFlightExecution measures the live heap with 256 Connect
// calls in flight over loopback, all held in the handler, bare and
// governed: the difference per call is what an in-flight execution costs
// (its execution, attempt, contexts, the worker's goroutine stack is not
// heap). A measurement, logged.
func TestHeapPerInFlightExecution(t *testing.T) {
	const inFlight = 256
	heap := map[string]float64{}
	for _, impl := range []string{"bare", "agentsafe", "bare", "agentsafe", "bare", "agentsafe"} {
		h := &blockingRead{release: make(chan struct{})}
		client, stop := connectServer(t, impl == "agentsafe", h)
		ctx := context.Background()
		call := func() error {
			_, err := client.Read(ctx, connect.NewRequest(&testv1.Request{Id: "42"}))
			return err
		}
		base := liveHeap()
		h.held.Add(inFlight)
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				if err := call(); err != nil {
					t.Error(err)
				}
			})
		}
		h.held.Wait()
		held := liveHeap()
		close(h.release)
		wg.Wait()
		stop()
		per := float64(held-base) / inFlight
		if v, ok := heap[impl]; !ok || per < v {
			heap[impl] = per // the least of three: noise only adds
		}
	}
	t.Logf("live heap per in-flight call (least of 3): bare %.0f B, governed %.0f B: %.0f B per in-flight execution",
		heap["bare"], heap["agentsafe"], heap["agentsafe"]-heap["bare"])
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

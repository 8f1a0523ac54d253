package connectadapter_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// readService answers Read at once.
type readService struct {
	testv1connect.UnimplementedTestServiceHandler
}

func (readService) Read(_ context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return connect.NewResponse(&testv1.Response{Id: req.Msg.GetId()}), nil
}

// BenchmarkUnary makes the same unary Connect call (Read: a read with
// retries configured, so its request is also snapshotted for retries; a
// tiny message) over loopback HTTP/1.1, to a bare server and to one governed
// by the interceptor (no event sinks):
//
//	go test -run '^$' -bench Unary -count 6 ./connectadapter/ | tee unary.txt
//	benchstat -col /server unary.txt
//
// On a machine shared with noisy neighbours, server=paired is the one to
// read: each iteration makes one bare and one governed call, in alternating
// order, so noise hits both alike; it reports the median of each and the
// overhead of the governed median over the bare one.
func BenchmarkUnary(b *testing.B) {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		b.Fatal(err)
	}
	guard := connectadapter.NewInterceptor(eng)
	client := func(b *testing.B, opts ...connect.HandlerOption) testv1connect.TestServiceClient {
		mux := http.NewServeMux()
		mux.Handle(testv1connect.NewTestServiceHandler(readService{}, opts...))
		return testv1connect.NewTestServiceClient(httpClient(b, false), serve(b, mux))
	}
	req := connect.NewRequest(&testv1.Request{Id: "42"})
	ctx := context.Background()
	call := func(b *testing.B, c testv1connect.TestServiceClient) {
		if _, err := c.Read(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("server=bare", func(b *testing.B) {
		c := client(b)
		b.ReportAllocs()
		for b.Loop() {
			call(b, c)
		}
	})
	b.Run("server=governed", func(b *testing.B) {
		c := client(b, connect.WithInterceptors(guard))
		b.ReportAllocs()
		for b.Loop() {
			call(b, c)
		}
	})
	b.Run("server=paired", func(b *testing.B) {
		bare, governed := client(b), client(b, connect.WithInterceptors(guard))
		var tb, tg []time.Duration
		timed := func(c testv1connect.TestServiceClient, into *[]time.Duration) {
			start := time.Now()
			call(b, c)
			*into = append(*into, time.Since(start))
		}
		for i := 0; b.Loop(); i++ {
			if i%2 == 0 {
				timed(bare, &tb)
				timed(governed, &tg)
			} else {
				timed(governed, &tg)
				timed(bare, &tb)
			}
		}
		mb, mg := median(tb), median(tg)
		b.ReportMetric(float64(mb.Nanoseconds()), "bare-p50-ns")
		b.ReportMetric(float64(mg.Nanoseconds()), "governed-p50-ns")
		b.ReportMetric(100*(float64(mg)/float64(mb)-1), "overhead-%")
	})
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

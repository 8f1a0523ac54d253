package bench

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
	grpcretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	grpctimeout "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// The services answer at once: what is measured is the governance around
// a loopback round trip. Read's capability comes from its method option
// (read, two retries, one second per attempt).

type connectRead struct {
	testv1connect.UnimplementedTestServiceHandler
}

func (connectRead) Read(_ context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return connect.NewResponse(&testv1.Response{Id: r.Msg.GetId()}), nil
}

// optionsEngine is an engine with the test service's method options, but
// for Gated's approval, replaced so that the engine needs no approval store
// (the benchmarks call only Read).
func optionsEngine(b *testing.B) *middleware.Engine {
	eng, err := middleware.New(middleware.NewRegistry().Register(testv1connect.TestServiceGatedProcedure,
		middleware.Capability{SideEffect: middleware.SideEffectWrite}))
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// BenchmarkConnectUnary: one unary Connect call over loopback HTTP/1.1,
// with and without the agentsafe interceptor.
func BenchmarkConnectUnary(b *testing.B) {
	eng := optionsEngine(b)
	for _, tc := range []struct {
		name string
		opts []connect.HandlerOption
	}{
		{"server=bare", nil},
		{"server=agentsafe", []connect.HandlerOption{connect.WithInterceptors(connectadapter.NewInterceptor(eng))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle(testv1connect.NewTestServiceHandler(connectRead{}, tc.opts...))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			client := testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
			req := &testv1.Request{Id: "42"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Read(ctx, connect.NewRequest(req)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type grpcRead struct {
	testv1.UnimplementedTestServiceServer
}

func (grpcRead) Read(_ context.Context, r *testv1.Request) (*testv1.Response, error) {
	return &testv1.Response{Id: r.GetId()}, nil
}

// BenchmarkGRPCUnary: one unary gRPC call over loopback, bare, with
// go-grpc-middleware's client retry and timeout interceptors (two
// retries on Unavailable, one second per attempt), and with agentsafe.
func BenchmarkGRPCUnary(b *testing.B) {
	eng := optionsEngine(b)
	for _, tc := range []struct {
		name   string
		server []grpc.ServerOption
		client []grpc.DialOption
	}{
		{"impl=bare", nil, nil},
		{"impl=go-grpc-middleware", nil, []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			grpctimeout.UnaryClientInterceptor(time.Second),
			grpcretry.UnaryClientInterceptor(grpcretry.WithMax(2), grpcretry.WithCodes(codes.Unavailable), grpcretry.WithPerRetryTimeout(time.Second)),
		)}},
		{"impl=agentsafe", grpcadapter.ServerOptions(eng), nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(tc.server...)
			testv1.RegisterTestServiceServer(srv, grpcRead{})
			go srv.Serve(lis)
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), append(tc.client, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := testv1.NewTestServiceClient(conn)
			req := &testv1.Request{Id: "42"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Read(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNetHTTP: a handler that reads its body and answers, in process,
// bare and wrapped: the cost of reading the body once, binding it and
// replaying it, and of buffering the response.
func BenchmarkNetHTTP(b *testing.B) {
	eng, err := middleware.New(middleware.NewRegistry().Register("upload", middleware.Capability{
		SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: time.Second, Retry: middleware.Retry{MaxRetries: 1}}),
		middleware.WithProtoFiles(nil))
	if err != nil {
		b.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte{byte(n)})
	})
	for _, size := range []struct {
		name string
		n    int
	}{{"body=1KiB", 1 << 10}, {"body=64KiB", 64 << 10}} {
		body := bytes.Repeat([]byte("a"), size.n)
		for _, impl := range []struct {
			name string
			h    http.Handler
		}{{"impl=bare", handler}, {"impl=agentsafe", nethttpadapter.Wrap(eng, "upload", handler, nethttpadapter.WithMaxBodyBytes(1<<20))}} {
			b.Run(size.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size.n))
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/upload", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/octet-stream")
					w := httptest.NewRecorder()
					impl.h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d", w.Code)
					}
				}
			})
		}
	}
}

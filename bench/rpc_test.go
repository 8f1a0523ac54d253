package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
	grpcretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	grpctimeout "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sethvargo/go-retry"
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
func optionsEngine(b testing.TB) *middleware.Engine {
	eng, err := middleware.New(middleware.NewRegistry().Register(testv1connect.TestServiceGatedProcedure,
		middleware.Capability{SideEffect: middleware.SideEffectWrite}), quiet)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// inlineRPCEngine is optionsEngine with Read declared Inline: its attempts
// run on the serving goroutine (the test service's handlers honour their
// context).
func inlineRPCEngine(b testing.TB) *middleware.Engine {
	read, ok := adapter.Resolve(optionsEngine(b), testv1connect.TestServiceReadProcedure).Capability()
	if !ok {
		b.Fatal("Read has no capability")
	}
	read.Inline = true
	eng, err := middleware.New(middleware.NewRegistry().
		Register(testv1connect.TestServiceGatedProcedure, middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register(testv1connect.TestServiceReadProcedure, read), quiet)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// BenchmarkConnectUnary: one unary Connect call over loopback HTTP/1.1,
// without the agentsafe interceptor, with it, and with Read declared
// Inline.
func BenchmarkConnectUnary(b *testing.B) {
	eng, inline := optionsEngine(b), inlineRPCEngine(b)
	for _, tc := range []struct {
		name string
		opts []connect.HandlerOption
	}{
		{"server=bare", nil},
		{"server=agentsafe", []connect.HandlerOption{connect.WithInterceptors(connectadapter.NewInterceptor(eng))}},
		{"server=agentsafe-inline", []connect.HandlerOption{connect.WithInterceptors(connectadapter.NewInterceptor(inline))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle(testv1connect.NewTestServiceHandler(connectRead{}, tc.opts...))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			client := testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
			req := &testv1.Request{Id: "42"}
			ctx := context.Background()
			defer cpu(b)()
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
// retries on Unavailable, one second per attempt), and with agentsafe,
// default and with Read declared Inline.
func BenchmarkGRPCUnary(b *testing.B) {
	eng, inline := optionsEngine(b), inlineRPCEngine(b)
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
		{"impl=agentsafe-inline", grpcadapter.ServerOptions(inline), nil},
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
			defer cpu(b)()
			for b.Loop() {
				if _, err := client.Read(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// netHTTPCase is the route and handler the net/http benchmarks share: a
// write declared idempotent with one retry (so the body is replayable),
// whose handler reads its body and answers; bare, governed by default,
// governed Inline, and under the standard library's bounded reporting
// (timeoutRetry).
type netHTTPImpl struct {
	name string
	h    http.Handler
}

func netHTTPCase(b *testing.B) []netHTTPImpl {
	upload := middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: time.Second, Retry: middleware.Retry{MaxRetries: 1}}
	engine := func(c middleware.Capability) *middleware.Engine {
		eng, err := middleware.New(middleware.NewRegistry().Register("upload", c), middleware.WithProtoFiles(nil), quiet)
		if err != nil {
			b.Fatal(err)
		}
		return eng
	}
	inline := upload
	inline.Inline = true
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte{byte(n)})
	})
	return []netHTTPImpl{
		{"impl=bare", handler},
		{"impl=agentsafe", nethttpadapter.Wrap(engine(upload), "upload", handler, nethttpadapter.WithMaxBodyBytes(1<<20))},
		{"impl=agentsafe-inline", nethttpadapter.Wrap(engine(inline), "upload", handler, nethttpadapter.WithMaxBodyBytes(1<<20))},
		{"impl=timeouthandler", timeoutRetry(handler, time.Second, 1, 1<<20)},
	}
}

// timeoutRetry is the same guarantee with the standard library and
// go-retry: the body read once (at most limit bytes) and replayed to
// each attempt; each attempt under http.TimeoutHandler (the handler on a
// goroutine of its own, its response buffered, 503 at the timeout); a
// 502, 503 or 504 retried up to retries times with go-retry's
// exponential backoff (250 ms base, a fresh one per request); only the
// last attempt's response reaches the client.
func timeoutRetry(h http.Handler, timeout time.Duration, retries uint64, limit int64) http.Handler {
	th := http.TimeoutHandler(h, timeout, "")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var last *recorder
		_ = retry.Do(r.Context(), retry.WithMaxRetries(retries, retry.NewExponential(250*time.Millisecond)), func(ctx context.Context) error {
			last = &recorder{header: http.Header{}}
			req := r.WithContext(ctx)
			req.Body = io.NopCloser(bytes.NewReader(body))
			th.ServeHTTP(last, req)
			switch last.status {
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				return retry.RetryableError(errors.New(http.StatusText(last.status)))
			}
			return nil
		})
		maps.Copy(w.Header(), last.header)
		if last.status == 0 {
			last.status = http.StatusOK
		}
		w.WriteHeader(last.status)
		w.Write(last.body.Bytes())
	})
}

// recorder is one attempt's buffered response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

var bodySizes = []struct {
	name string
	n    int
}{{"body=1KiB", 1 << 10}, {"body=64KiB", 64 << 10}}

// BenchmarkNetHTTP: a handler that reads its body and answers, in process,
// bare, governed (default and Inline), and under http.TimeoutHandler with
// a go-retry loop: the cost of reading the body once and replaying it,
// and of buffering the response.
func BenchmarkNetHTTP(b *testing.B) {
	impls := netHTTPCase(b)
	for _, size := range bodySizes {
		body := bytes.Repeat([]byte("a"), size.n)
		for _, impl := range impls {
			b.Run(size.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				defer cpu(b)()
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

// BenchmarkNetHTTPLoopback: the same over loopback HTTP/1.1, one
// connection kept alive (without the TimeoutHandler peer).
func BenchmarkNetHTTPLoopback(b *testing.B) {
	impls := slices.DeleteFunc(netHTTPCase(b), func(i netHTTPImpl) bool { return i.name == "impl=timeouthandler" })
	for _, size := range bodySizes {
		body := bytes.Repeat([]byte("a"), size.n)
		for _, impl := range impls {
			b.Run(size.name+"/"+impl.name, func(b *testing.B) {
				srv := httptest.NewServer(impl.h)
				defer srv.Close()
				client := srv.Client()
				b.SetBytes(int64(size.n))
				defer cpu(b)()
				for b.Loop() {
					resp, err := client.Post(srv.URL+"/upload", "application/octet-stream", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	}
}

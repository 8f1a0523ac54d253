package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// forged is what a handler might set or forward from a downstream call: the
// envelope's keys with values that are not this execution's.
func forged() metadata.MD {
	return metadata.Pairs(
		"agentsafe-execution-id", "exe_forged",
		"agentsafe-attempts", "9",
		"agentsafe-approval-id", "apr_00000000000000000000000000000000",
		"agentsafe-code", "TIMEOUT",
		"agentsafe-retryable", "true",
		"x-own", "kept",
	)
}

// forger is a service whose handlers put the envelope's keys in their header
// and trailer every way gRPC lets them.
type forger struct {
	testv1.UnimplementedTestServiceServer
	seen chan middleware.Execution
	fail bool
}

func (f *forger) Write(ctx context.Context, _ *testv1.Request) (*testv1.Response, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	f.seen <- x
	_ = grpc.SetHeader(ctx, forged())
	_ = grpc.SetTrailer(ctx, forged())
	if f.fail {
		return nil, status.Error(codes.FailedPrecondition, "order already refunded")
	}
	return &testv1.Response{}, nil
}

func (f *forger) Stream(_ *testv1.Request, ss grpc.ServerStreamingServer[testv1.Response]) error {
	x, _ := middleware.ExecutionFromContext(ss.Context())
	f.seen <- x
	_ = ss.SetHeader(forged())
	_ = grpc.SetHeader(ss.Context(), forged())
	ss.SetTrailer(forged())
	_ = grpc.SetTrailer(ss.Context(), forged())
	if err := ss.SendHeader(forged()); err != nil {
		return err
	}
	if err := ss.Send(&testv1.Response{}); err != nil {
		return err
	}
	if f.fail {
		return status.Error(codes.FailedPrecondition, "stream broke")
	}
	return nil
}

// The envelope's metadata keys are the engine's alone: a handler that sets
// or forwards agentsafe-execution-id, -attempts or -approval-id, in its
// header or trailer, unary or stream, must not put a second value on the
// wire, and EnvelopeFrom must read the engine's.
func TestHandlerMetadataCannotShadowTheEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   bool
		stream bool
	}{
		{"unary", false, false},
		{"unary failing", true, false},
		{"stream", false, true},
		{"stream failing", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &forger{seen: make(chan middleware.Execution, 1), fail: tc.fail}
			c := testv1.NewTestServiceClient(serve(t, newEngine(t, nil), svc))
			var header, trailer metadata.MD
			var err error
			if tc.stream {
				var st grpc.ServerStreamingClient[testv1.Response]
				st, err = c.Stream(t.Context(), &testv1.Request{})
				if err != nil {
					t.Fatal(err)
				}
				for err == nil {
					_, err = st.Recv()
				}
				if errors.Is(err, io.EOF) {
					err = nil
				}
				header, _ = st.Header()
				trailer = st.Trailer()
			} else {
				_, err = c.Write(t.Context(), &testv1.Request{}, grpc.Header(&header), grpc.Trailer(&trailer))
			}
			if (err != nil) != tc.fail {
				t.Fatalf("call: %v", err)
			}
			x := received(t, svc.seen)

			for _, md := range []struct {
				where string
				md    metadata.MD
			}{{"header", header}, {"trailer", trailer}} {
				for _, v := range md.md.Get("agentsafe-execution-id") {
					if v != x.ID {
						t.Errorf("%s agentsafe-execution-id %q: the handler's value reached the wire next to the engine's %q", md.where, v, x.ID)
					}
				}
				for _, k := range []string{"agentsafe-execution-id", "agentsafe-attempts", "agentsafe-approval-id", "agentsafe-code", "agentsafe-retryable"} {
					if n := len(md.md.Get(k)); n > 1 {
						t.Errorf("%s has %d values of %s: %q", md.where, n, k, md.md.Get(k))
					}
				}
				for _, v := range md.md.Get("agentsafe-code") {
					if v != "EXECUTION_FAILED" {
						t.Errorf("%s agentsafe-code %q, want the engine's EXECUTION_FAILED", md.where, v)
					}
				}
				for _, v := range md.md.Get("agentsafe-retryable") {
					if v != "false" {
						t.Errorf("%s agentsafe-retryable %q, want the engine's false", md.where, v)
					}
				}
				for _, v := range md.md.Get("agentsafe-attempts") {
					if v != "1" {
						t.Errorf("%s agentsafe-attempts %q, want the engine's 1", md.where, v)
					}
				}
				if v := md.md.Get("agentsafe-approval-id"); len(v) != 0 {
					t.Errorf("%s agentsafe-approval-id %q on a call that consumed no approval", md.where, v)
				}
			}
			if len(header.Get("x-own"))+len(trailer.Get("x-own")) == 0 {
				t.Error("the handler's own metadata was dropped with the envelope's keys")
			}
			env, ok := grpcadapter.EnvelopeFrom(header, trailer, err)
			if !ok || env.ExecutionID != x.ID || env.Attempts != 1 || env.ApprovalID != "" {
				t.Errorf("EnvelopeFrom %+v, want execution %s after 1 attempt, no approval", env, x.ID)
			}
		})
	}
}

// received takes what ch already holds: the handler sent it before the
// client had its answer.
func received[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("the handler did not run")
		var zero T
		return zero
	}
}

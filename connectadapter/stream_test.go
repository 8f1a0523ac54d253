package connectadapter_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// A governed stream has its ids in the response headers before the first
// message, one envelope in its trailers, and is never retried.
func TestStream(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("ids before the first message, envelope in trailers", func(t *testing.T) {
			srv := newServer(t, serverConfig{})
			srv.svc.streamStep = make(chan struct{})
			stream, err := srv.client(t, p).Stream(t.Context(), request(&testv1.Request{Id: "s", Count: 3}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if !stream.Receive() {
				t.Fatalf("no first message: %v", stream.Err())
			}
			// The handler is now waiting for streamStep: the headers came
			// with the first message, while the stream is still open.
			first := stream.Msg()
			h, ok := adapter.ReadHeaders(stream.ResponseHeader())
			if !ok || h.ExecutionID != first.GetExecutionId() || h.Attempts != 1 {
				t.Fatalf("headers before the end %+v (ok=%t), want execution %s, attempt 1", h, ok, first.GetExecutionId())
			}
			close(srv.svc.streamStep)
			n := 1
			for stream.Receive() {
				n++
			}
			if err := stream.Err(); err != nil || n != 3 {
				t.Fatalf("received %d messages, err %v; want 3", n, err)
			}
			tr, ok := adapter.ReadHeaders(stream.ResponseTrailer())
			if !ok || tr.ExecutionID != h.ExecutionID || tr.Attempts != 1 {
				t.Errorf("trailers %+v (ok=%t), want the envelope of %s", tr, ok, h.ExecutionID)
			}
			env, ok := connectadapter.ReadEnvelopeHeader(stream.ResponseHeader(), stream.Err())
			if !ok || env.Status != middleware.StatusCompleted || env.ExecutionID != h.ExecutionID {
				t.Errorf("envelope %+v, want completed", env)
			}
			srv.sink.final(t)
			srv.sink.wantTypes(t, h.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted)
		})

		t.Run("never retried", func(t *testing.T) {
			// Retry metadata is valid for a read, but a stream cannot be replayed.
			reg := middleware.NewRegistry().Register(procStream, middleware.Capability{
				SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond},
			})
			srv := newServer(t, serverConfig{reg: reg})
			stream, err := srv.client(t, p).Stream(t.Context(), request(&testv1.Request{Count: 1, FailCode: "unavailable"}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			for stream.Receive() {
			}
			wantConnectCode(t, stream.Err(), connect.CodeUnavailable)
			env, ok := connectadapter.ReadEnvelopeHeader(stream.ResponseTrailer(), stream.Err())
			if !ok || env.Attempts != 1 || env.Error.Code != middleware.CodeExecutionFailed || !env.Error.Retryable {
				t.Errorf("envelope %+v (error %+v), want one attempt of a failed read", env, env.Error)
			}
			for where, h := range map[string]http.Header{"headers": stream.ResponseHeader(), "trailers": stream.ResponseTrailer()} {
				if v := h.Values(adapter.HeaderExecutionID); len(v) != 1 || v[0] != env.ExecutionID {
					t.Errorf("%s in the %s: %q, want exactly [%s]", adapter.HeaderExecutionID, where, v, env.ExecutionID)
				}
			}
			if runs := srv.svc.runs.Load(); runs != 1 {
				t.Errorf("stream handler ran %d times, want 1: streams are never retried", runs)
			}
			srv.sink.final(t)
		})

		t.Run("explicit timeout", func(t *testing.T) {
			reg := middleware.NewRegistry().Register(procStream, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 30 * time.Millisecond})
			srv := newServer(t, serverConfig{reg: reg})
			stream, err := srv.client(t, p).Stream(t.Context(), request(&testv1.Request{Mode: "block"}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			for stream.Receive() {
			}
			wantConnectCode(t, stream.Err(), connect.CodeDeadlineExceeded)
			if env, ok := connectadapter.ReadEnvelopeHeader(nil, stream.Err()); !ok || env.Error.Code != middleware.CodeTimeout {
				t.Errorf("envelope %+v, want TIMEOUT", env)
			}
			srv.sink.final(t)
		})
	})
}

package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// forge puts the envelope's keys in h with values that are not the
// execution's, as a handler forwarding a downstream response's might.
func forge(h http.Header) {
	h.Set(adapter.HeaderExecutionID, "exe_forged")
	h.Set(adapter.HeaderAttempts, "9")
	h.Set(adapter.HeaderApprovalID, "apr_00000000000000000000000000000000")
	h.Set("X-Own", "kept")
}

// forger runs after the guard and forges the envelope's keys everywhere a
// handler can set response metadata.
type forger struct{}

func (forger) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
			forge(info.ResponseHeader())
			forge(info.ResponseTrailer())
		}
		res, err := next(ctx, req)
		if res != nil {
			forge(res.Header())
			forge(res.Trailer())
		}
		if ce, ok := errors.AsType[*connect.Error](err); ok {
			forge(ce.Meta())
		}
		return res, err
	}
}

func (forger) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (forger) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		forge(conn.ResponseHeader())
		forge(conn.ResponseTrailer())
		return next(ctx, conn)
	}
}

// The envelope's keys are the engine's alone: a handler that sets or
// forwards Agentsafe-Execution-Id, -Attempts or -Approval-Id, in its
// headers or trailers, unary or stream, must not put a second or another
// value on the wire, and ReadEnvelope must read the engine's.
func TestHandlerMetadataCannotShadowTheEnvelope(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		for _, tc := range []struct {
			name   string
			stream bool
			fail   string
		}{
			{"unary", false, ""},
			{"unary failing", false, "invalid_argument"},
			{"stream", true, ""},
			{"stream failing", true, "invalid_argument"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv := newServer(t, serverConfig{after: []connect.Interceptor{forger{}}})
				c := srv.client(t, p)
				in := &testv1.Request{Count: 1, FailCode: tc.fail}
				if tc.fail != "" {
					in.FailTimes = -1
				}
				var header, trailer http.Header
				var err error
				var env middleware.Envelope
				var ok bool
				if tc.stream {
					st, serr := c.Stream(t.Context(), request(in))
					if serr != nil {
						t.Fatal(serr)
					}
					for st.Receive() {
					}
					err = st.Err()
					header, trailer = st.ResponseHeader(), st.ResponseTrailer()
					env, ok = connectadapter.ReadEnvelopeHeader(trailer, err)
					_ = st.Close()
				} else {
					var res *connect.Response[testv1.Response]
					res, err = c.Read(t.Context(), request(in))
					if res != nil {
						header, trailer = res.Header(), res.Trailer()
					}
					env, ok = connectadapter.ReadEnvelope(res, err)
				}
				if (err != nil) != (tc.fail != "") {
					t.Fatalf("call: %v", err)
				}
				id := srv.sink.final(t).ExecutionID
				wire := []struct {
					where string
					h     http.Header
				}{{"header", header}, {"trailer", trailer}}
				if ce, isCE := errors.AsType[*connect.Error](err); isCE {
					wire = append(wire, struct {
						where string
						h     http.Header
					}{"error metadata", ce.Meta()})
				}
				own := false
				for _, w := range wire {
					own = own || w.h.Get("X-Own") != ""
					for _, k := range []string{adapter.HeaderExecutionID, adapter.HeaderAttempts, adapter.HeaderApprovalID} {
						// A stream's ids are in its headers and its trailers,
						// which a Connect client merges into an error's
						// metadata.
						if v := w.h.Values(k); len(v) > 1 && !(tc.stream && w.where == "error metadata") {
							t.Errorf("%s has %d values of %s: %q", w.where, len(v), k, v)
						}
					}
					for _, v := range w.h.Values(adapter.HeaderExecutionID) {
						if v != id {
							t.Errorf("%s %s %q: the handler's value reached the wire, the execution is %s", w.where, adapter.HeaderExecutionID, v, id)
						}
					}
					for _, v := range w.h.Values(adapter.HeaderAttempts) {
						if v != "1" {
							t.Errorf("%s %s %q, want the engine's 1", w.where, adapter.HeaderAttempts, v)
						}
					}
					if v := w.h.Values(adapter.HeaderApprovalID); len(v) != 0 {
						t.Errorf("%s %s %q on a call that consumed no approval", w.where, adapter.HeaderApprovalID, v)
					}
				}
				if !own && tc.fail == "" {
					t.Error("the handler's own metadata was dropped with the envelope's keys")
				}
				if !ok || env.ExecutionID != id || env.Attempts != 1 || env.ApprovalID != "" {
					t.Errorf("envelope read back %+v, want execution %s after 1 attempt, no approval", env, id)
				}
			})
		}
	})
}

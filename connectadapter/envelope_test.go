package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// envelopeOf rebuilds the envelope the engine produced from its final event
// (which carries every envelope field but the message).
func envelopeOf(e middleware.Event) middleware.Envelope {
	env := middleware.Envelope{ExecutionID: e.ExecutionID, Procedure: e.Procedure, Attempts: e.Attempts, ApprovalID: e.ApprovalID, Status: middleware.StatusCompleted}
	switch {
	case e.Type == middleware.EventCancelled:
		env.Status = middleware.StatusCancelled
	case e.Code == middleware.CodeApprovalRequired:
		env.Status = middleware.StatusApprovalRequired
	case e.Type == middleware.EventFailed:
		env.Status = middleware.StatusFailed
	}
	if e.Type != middleware.EventCompleted {
		env.Error = &middleware.EnvelopeError{Code: e.Code, Retryable: e.Retryable}
	}
	return env
}

// The Agentsafe-* headers, the error and its detail decode, through a real
// Connect client in every protocol, to the envelope the engine produced.
// Only errors the engine decided carry the detail, which names the
// procedure.
func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		call    func(context.Context, testv1connectClient) (connect.AnyResponse, error)
		code    connect.Code
		message string
		detail  bool
	}{
		{"completed after a retry", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Read(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "unavailable"}))
		}, connect.CodeUnknown, "", false},
		{"handler's connect error, retries exhausted", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Read(ctx, request(&testv1.Request{FailTimes: -1, FailCode: "unavailable"}))
		}, connect.CodeUnavailable, "backend unavailable", false},
		{"concealed plain error", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Write(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "plain"}))
		}, connect.CodeInternal, adapter.ConcealedMessage, true},
		{"timeout", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Slow(ctx, request(&testv1.Request{Mode: "block"}))
		}, connect.CodeDeadlineExceeded, "attempt 1 timed out after 50ms", true},
		{"malformed approval header", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			req := request(&testv1.Request{})
			req.Header().Set(adapter.HeaderApprovalID, "apr_not-an-id")
			return c.Read(ctx, req)
		}, connect.CodeInvalidArgument, adapter.HeaderApprovalID, true},
		// Two values of a single-valued header are malformed: taking either
		// would silently drop the other.
		{"approval header sent twice", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			req := request(&testv1.Request{})
			req.Header().Add(adapter.HeaderApprovalID, "apr_00000000000000000000000000000000")
			req.Header().Add(adapter.HeaderApprovalID, "apr_11111111111111111111111111111111")
			return c.Read(ctx, req)
		}, connect.CodeInvalidArgument, adapter.HeaderApprovalID, true},
	}
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{})
		c := srv.client(t, p)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res, err := tc.call(t.Context(), c)
				want := envelopeOf(srv.sink.final(t))
				got, ok := connectadapter.ReadEnvelope(res, err)
				if !ok {
					t.Fatalf("no envelope in %v", err)
				}
				var meta http.Header
				if !tc.detail {
					want.Procedure = "" // only agentsafe's detail names it
				}
				if err == nil {
					meta = res.Header()
				} else {
					ce := wantConnectCode(t, err, tc.code)
					if !strings.Contains(ce.Message(), tc.message) {
						t.Errorf("message %q, want it to contain %q", ce.Message(), tc.message)
					}
					if got.Error.Message != ce.Message() {
						t.Errorf("envelope message %q, want the error's %q", got.Error.Message, ce.Message())
					}
					want.Error.Message = got.Error.Message
					meta = ce.Meta()
					if d := detailTypes(ce); tc.detail != slices.Contains(d, "agentsafe.v1.ErrorDetail") {
						t.Errorf("details %v: agentsafe's detail is for the errors it decides alone", d)
					}
				}
				if !equalEnvelopes(got, want) {
					t.Errorf("decoded envelope\n %+v (error %+v)\nwant the engine's\n %+v (error %+v)", got, got.Error, want, want.Error)
				}
				// Exactly one value of each header: sent once, in the headers.
				if v := meta.Values(adapter.HeaderExecutionID); len(v) != 1 || v[0] != want.ExecutionID {
					t.Errorf("%s: %q, want exactly [%s]", adapter.HeaderExecutionID, v, want.ExecutionID)
				}
				if h, ok := adapter.ReadHeaders(meta); !ok || h.Attempts != want.Attempts {
					t.Errorf("headers say %+v, want %d attempts", h, want.Attempts)
				}
			})
		}
	})
}

type testv1connectClient = interface {
	Read(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error)
	Write(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error)
	Slow(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error)
}

func equalEnvelopes(a, b middleware.Envelope) bool {
	if (a.Error == nil) != (b.Error == nil) || (a.Error != nil && *a.Error != *b.Error) {
		return false
	}
	a.Error, b.Error, a.Duration, b.Duration = nil, nil, 0, 0
	return a == b
}

func detailTypes(ce *connect.Error) []string {
	var types []string
	for _, d := range ce.Details() {
		types = append(types, d.Type())
	}
	return types
}

// Interceptors listed before the guard see the engine's *middleware.Error
// in an error the engine decided, and a handler's own error as the very
// value the handler returned.
func TestServerSideErrorChain(t *testing.T) {
	var got error
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			got = err
			return res, err
		}
	})
	own := connect.NewError(connect.CodeAlreadyExists, errors.New("order 42 exists"))
	srv := newServer(t, serverConfig{before: []connect.Interceptor{outer}, handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
		if req.Msg.GetMode() == "own" {
			return nil, own
		}
		return behave(ctx, req)
	}})
	c := srv.client(t, protocols[0])
	if _, err := c.Write(t.Context(), request(&testv1.Request{FailTimes: 1, FailCode: "plain"})); err == nil {
		t.Fatal("want an error")
	}
	if me, ok := errors.AsType[*middleware.Error](got); !ok || me.Code != middleware.CodeExecutionFailed || !strings.Contains(me.Error(), secret) {
		t.Errorf("server-side error %v: want the engine's *middleware.Error, with the cause", got)
	}
	if _, err := c.Write(t.Context(), request(&testv1.Request{Mode: "own"})); err == nil {
		t.Fatal("want an error")
	}
	if got != error(own) {
		t.Errorf("server-side error %#v, want the handler's own %#v", got, own)
	}
}

// ReadEnvelope reads the envelope from the Agentsafe-* headers alone: it
// reports false for calls that were not governed and for errors without
// them, even when an agentsafe detail is there, and it takes the detail's
// procedure only when the detail names the same execution.
func TestReadEnvelopeFromHeaders(t *testing.T) {
	srv := newServer(t, serverConfig{})
	res, err := srv.client(t, protocols[0]).Ungoverned(t.Context(), request(&testv1.Request{}))
	if err != nil {
		t.Fatal(err)
	}
	if env, ok := connectadapter.ReadEnvelope(res, err); ok {
		t.Errorf("ungoverned call has envelope %+v", env)
	}
	if res.Header().Get(adapter.HeaderExecutionID) != "" {
		t.Error("an ungoverned call must pass through untouched, without agentsafe headers")
	}
	if env, ok := connectadapter.ReadEnvelope(nil, errors.New("x")); ok {
		t.Errorf("plain error has envelope %+v", env)
	}
	withDetail := func(d *agentsafev1.ErrorDetail, header ...string) *connect.Error {
		ce := connect.NewError(connect.CodeInternal, errors.New("x"))
		cd, _ := connect.NewErrorDetail(d)
		ce.AddDetail(cd)
		for i := 0; i < len(header); i += 2 {
			ce.Meta().Set(header[i], header[i+1])
		}
		return ce
	}
	detail := &agentsafev1.ErrorDetail{Code: "TIMEOUT", Retryable: true, ExecutionId: "exe_downstream", Procedure: "/down.v1.S/M"}
	if env, ok := connectadapter.ReadEnvelope(nil, withDetail(detail)); ok {
		t.Errorf("a relayed detail without this call's headers read as envelope %+v", env)
	}
	env, ok := connectadapter.ReadEnvelope(nil, withDetail(detail, adapter.HeaderExecutionID, "exe_up", adapter.HeaderAttempts, "1",
		adapter.HeaderCode, "EXECUTION_FAILED", adapter.HeaderRetryable, "false"))
	if !ok || env.ExecutionID != "exe_up" || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Procedure != "" || env.Error.Message != "x" {
		t.Errorf("envelope %+v (error %+v), want this call's, without the downstream detail's procedure", env, env.Error)
	}
	if env, ok := connectadapter.ReadEnvelope(nil, withDetail(detail, adapter.HeaderExecutionID, "exe_up")); ok {
		t.Errorf("an error after a completed execution read as envelope %+v", env)
	}
	// A code this client does not know is a failure not safe to re-invoke.
	env, ok = connectadapter.ReadEnvelope(nil, withDetail(&agentsafev1.ErrorDetail{ExecutionId: "exe_1", Procedure: "/p.v1.S/M"},
		adapter.HeaderExecutionID, "exe_1", adapter.HeaderCode, "FROM_THE_FUTURE", adapter.HeaderRetryable, "true"))
	if !ok || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Procedure != "/p.v1.S/M" {
		t.Errorf("envelope %+v (error %+v), want a non-retryable failure of /p.v1.S/M", env, env.Error)
	}
}

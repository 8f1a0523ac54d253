package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
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

// The error detail and the Agentsafe-* headers decode, through a real
// Connect client in every protocol, to the envelope the engine produced.
func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		call    func(context.Context, testv1connectClient) (connect.AnyResponse, error)
		code    connect.Code
		message string
	}{
		{"completed after a retry", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Read(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "unavailable"}))
		}, connect.CodeUnknown, ""},
		{"handler's connect error, retries exhausted", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Read(ctx, request(&testv1.Request{FailTimes: -1, FailCode: "unavailable"}))
		}, connect.CodeUnavailable, "backend unavailable"},
		{"concealed plain error", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Write(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "plain"}))
		}, connect.CodeInternal, middleware.ConcealedMessage},
		{"timeout", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			return c.Slow(ctx, request(&testv1.Request{Mode: "block"}))
		}, connect.CodeDeadlineExceeded, "attempt 1 timed out after 50ms"},
		{"malformed approval header", func(ctx context.Context, c testv1connectClient) (connect.AnyResponse, error) {
			req := request(&testv1.Request{})
			req.Header().Set(middleware.HeaderApprovalID, "apr_not-an-id")
			return c.Read(ctx, req)
		}, connect.CodeInvalidArgument, middleware.HeaderApprovalID},
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
				if err == nil {
					meta = res.Header()
					want.Procedure = "" // not sent back on success
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
				}
				if !equalEnvelopes(got, want) {
					t.Errorf("decoded envelope\n %+v (error %+v)\nwant the engine's\n %+v (error %+v)", got, got.Error, want, want.Error)
				}
				// Exactly one value of each header: sent once, in the headers.
				if v := meta.Values(middleware.HeaderExecutionID); len(v) != 1 || v[0] != want.ExecutionID {
					t.Errorf("%s: %q, want exactly [%s]", middleware.HeaderExecutionID, v, want.ExecutionID)
				}
				if h, ok := middleware.EnvelopeFromHeaders(meta); !ok || h.Attempts != want.Attempts {
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

// A handler's plain Go error, or a panic, is concealed; a *connect.Error it
// returns on purpose keeps its code, message, details and metadata.
func TestConcealment(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			if req.Msg.GetMode() != "declared" {
				return behave(ctx, req)
			}
			ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("order 42 was already refunded"))
			d, _ := connect.NewErrorDetail(wrapperspb.String("ALREADY_REFUNDED"))
			ce.AddDetail(d)
			ce.Meta().Set("X-Order", "42")
			return nil, ce
		}})
		c := srv.client(t, p)
		for _, code := range []string{"plain", "retryable_plain", "panic"} {
			t.Run(code, func(t *testing.T) {
				_, err := c.Write(t.Context(), request(&testv1.Request{FailTimes: 1, FailCode: code}))
				ce := wantConnectCode(t, err, connect.CodeInternal)
				if ce.Message() != middleware.ConcealedMessage {
					t.Errorf("message %q, want %q", ce.Message(), middleware.ConcealedMessage)
				}
				if strings.Contains(err.Error(), secret) || strings.Contains(strings.Join(ce.Meta().Values("Grpc-Message"), ""), secret) {
					t.Errorf("the handler's error text reached the client: %v", err)
				}
				fin := srv.sink.final(t)
				if fin.Code != middleware.CodeExecutionFailed || !strings.Contains(fin.Error, secret) {
					t.Errorf("final event %+v, want EXECUTION_FAILED with the real error for operators", fin)
				}
			})
		}
		t.Run("declared connect error", func(t *testing.T) {
			_, err := c.Write(t.Context(), request(&testv1.Request{Mode: "declared"}))
			ce := wantConnectCode(t, err, connect.CodeFailedPrecondition)
			if ce.Message() != "order 42 was already refunded" || ce.Meta().Get("X-Order") != "42" {
				t.Errorf("message %q, meta %v; want the handler's", ce.Message(), ce.Meta())
			}
			var kinds []string
			for _, d := range ce.Details() {
				kinds = append(kinds, d.Type())
				if v, err := d.Value(); err == nil {
					if s, ok := v.(*wrapperspb.StringValue); ok && s.GetValue() != "ALREADY_REFUNDED" {
						t.Errorf("handler's detail %q changed", s.GetValue())
					}
				}
			}
			if len(kinds) != 2 || kinds[0] != "google.protobuf.StringValue" || kinds[1] != "agentsafe.v1.ErrorDetail" {
				t.Errorf("details %v, want the handler's then agentsafe's", kinds)
			}
			env, _ := connectadapter.ReadEnvelope(nil, err)
			if fin := srv.sink.final(t); env.ExecutionID != fin.ExecutionID || env.Error.Code != middleware.CodeExecutionFailed {
				t.Errorf("envelope %+v, final event %+v", env, fin)
			}
		})
		t.Run("server keeps serving after a panic", func(t *testing.T) {
			if _, err := c.Read(t.Context(), request(&testv1.Request{})); err != nil {
				t.Fatal(err)
			}
			srv.sink.final(t)
		})
	})
}

// The engine's error stays reachable on the server for interceptors listed
// before the guard; only the message and the detail reach the wire.
func TestServerSideErrorChain(t *testing.T) {
	var got error
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			got = err
			return res, err
		}
	})
	srv := newServer(t, serverConfig{before: []connect.Interceptor{outer}})
	if _, err := srv.client(t, protocols[0]).Write(t.Context(), request(&testv1.Request{FailTimes: 1, FailCode: "plain"})); err == nil {
		t.Fatal("want an error")
	}
	if me, ok := errors.AsType[*middleware.Error](got); !ok || me.Code != middleware.CodeExecutionFailed || !strings.Contains(me.Error(), secret) {
		t.Errorf("server-side error %v: want the engine's *middleware.Error, with the cause", got)
	}
	if env, ok := connectadapter.ReadEnvelope(nil, got); !ok || env.Procedure != procWrite {
		t.Errorf("server-side envelope %+v, want one for %s", env, procWrite)
	}
}

// ReadEnvelope reports false for calls that were not governed and for
// errors that carry no agentsafe detail.
func TestReadEnvelopeUngoverned(t *testing.T) {
	srv := newServer(t, serverConfig{})
	res, err := srv.client(t, protocols[0]).Ungoverned(t.Context(), request(&testv1.Request{}))
	if err != nil {
		t.Fatal(err)
	}
	if env, ok := connectadapter.ReadEnvelope(res, err); ok {
		t.Errorf("ungoverned call has envelope %+v", env)
	}
	if res.Header().Get(middleware.HeaderExecutionID) != "" {
		t.Error("an ungoverned call must pass through untouched, without agentsafe headers")
	}
	if env, ok := connectadapter.ReadEnvelope(nil, connect.NewError(connect.CodeInternal, errors.New("x"))); ok {
		t.Errorf("plain connect error has envelope %+v", env)
	}
	if env, ok := connectadapter.ReadEnvelope(nil, errors.New("x")); ok {
		t.Errorf("plain error has envelope %+v", env)
	}
	// A detail with a code this client does not know is a failure that is
	// not safe to re-invoke.
	ce := connect.NewError(connect.CodeInternal, errors.New("x"))
	d, _ := connect.NewErrorDetail(&agentsafev1.ErrorDetail{Code: "FROM_THE_FUTURE", Retryable: true, ExecutionId: "exe_1"})
	ce.AddDetail(d)
	if env, ok := connectadapter.ReadEnvelope(nil, ce); !ok || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.ExecutionID != "exe_1" {
		t.Errorf("envelope %+v (error %+v), want a non-retryable failure", env, env.Error)
	}
}

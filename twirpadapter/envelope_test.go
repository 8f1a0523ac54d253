package twirpadapter_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, &service{})
			client := h.client(enc.newClient)

			// Success: the envelope travels in headers, read through Transport.
			ctx, rec := twirpadapter.RecordEnvelope(t.Context())
			resp, err := client.Read(ctx, &testv1.Request{Id: "a", FailTimes: 1})
			if err != nil {
				t.Fatal(err)
			}
			env, ok := rec.Envelope(err)
			if !ok || env.Status != middleware.StatusCompleted || env.ExecutionID != resp.ExecutionId || env.Attempts != 2 || env.Error != nil {
				t.Errorf("envelope %+v, %t; want completed execution %s after 2 attempts", env, ok, resp.ExecutionId)
			}
			h.final()

			// Failure: the envelope travels in the error's meta.
			ctx, rec = twirpadapter.RecordEnvelope(t.Context())
			_, err = client.Write(ctx, &testv1.Request{FailTimes: 1, FailCode: "not_found"})
			final := h.final()
			env, ok = rec.Envelope(err)
			want := middleware.EnvelopeError{Code: middleware.CodeExecutionFailed, Message: "declared by the handler", Retryable: false}
			if !ok || env.Status != middleware.StatusFailed || env.ExecutionID != final.ExecutionID || env.Attempts != 1 || *env.Error != want {
				t.Errorf("envelope %+v (error %+v), %t; want failed %s after 1 attempt with %+v", env, env.Error, ok, final.ExecutionID, want)
			}
			if te := twerr(t, err); te.Code() != twirp.NotFound || te.Meta("hint") != "check the id" {
				t.Errorf("the handler's own error became %v (meta %v): it must keep its code, message and meta", te, te.MetaMap())
			}

			// Ungoverned: no envelope at all.
			ctx, rec = twirpadapter.RecordEnvelope(t.Context())
			ctx, header := withHeaders(ctx)
			if _, err := client.Ungoverned(ctx, &testv1.Request{}); err != nil {
				t.Fatal(err)
			}
			if env, ok := rec.Envelope(nil); ok || header.Get(middleware.HeaderExecutionID) != "" {
				t.Errorf("an ungoverned call has envelope %+v", env)
			}
			if _, err := client.Ungoverned(t.Context(), &testv1.Request{FailTimes: 1}); err == nil {
				t.Fatal("want an error")
			} else if env, ok := twirpadapter.EnvelopeFromError(err); ok {
				t.Errorf("an ungoverned error has envelope %+v", env)
			}
		})
	}
}

// Every code the engine can end with reaches a Twirp client as the code the
// table says, with the envelope in meta. A handler declares each one with a
// *middleware.Error, which keeps its code.
func TestCodesOnTheWire(t *testing.T) {
	t.Parallel()
	want := map[middleware.Code]twirp.ErrorCode{
		middleware.CodeTimeout:                twirp.DeadlineExceeded,
		middleware.CodeCancelled:              twirp.Canceled,
		middleware.CodeExecutionFailed:        twirp.Internal,
		middleware.CodeResourceExhausted:      twirp.ResourceExhausted,
		middleware.CodeUnauthenticated:        twirp.Unauthenticated,
		middleware.CodeApprovalRequired:       twirp.FailedPrecondition,
		middleware.CodeApprovalPending:        twirp.FailedPrecondition,
		middleware.CodeApprovalRejected:       twirp.PermissionDenied,
		middleware.CodeApprovalExpired:        twirp.PermissionDenied,
		middleware.CodeApprovalConsumed:       twirp.PermissionDenied,
		middleware.CodeApprovalNotFound:       twirp.PermissionDenied,
		middleware.CodeApprovalInputMismatch:  twirp.PermissionDenied,
		middleware.CodeApprovalResumeMismatch: twirp.PermissionDenied,
		middleware.CodeApprovalUnavailable:    twirp.Unavailable,
		middleware.CodeCapabilityNotFound:     twirp.NotFound,
		middleware.CodeInvalidArgument:        twirp.InvalidArgument,
	}
	if len(want) != len(middleware.Codes())-1 {
		t.Fatalf("the table covers %d codes; every code but OK needs a Twirp code", len(want))
	}
	svc := &service{hook: func(_ context.Context, in *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		c, _ := middleware.ParseCode(in.Id)
		return nil, &middleware.Error{Code: c, Message: "declared " + in.Id}
	}}
	h := newHarness(t, nil, svc)
	client := h.client(testv1.NewTestServiceJSONClient)
	for code, twcode := range want {
		_, err := client.Write(t.Context(), &testv1.Request{Id: code.String()})
		h.final()
		te := twerr(t, err)
		env, ok := twirpadapter.EnvelopeFromError(err)
		if te.Code() != twcode || !ok || env.Error.Code != code || te.Msg() != "declared "+code.String() {
			t.Errorf("%s reached the client as %s %q (envelope %+v), want %s", code, te.Code(), te.Msg(), env.Error, twcode)
		}
	}
}

// Plain Go errors and panics are concealed; a response that is nil is an
// error, not a completed envelope.
func TestHandlerErrorsAreConcealed(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				req  *testv1.Request
			}{
				{"plain error", &testv1.Request{FailTimes: 1, FailCode: "plain"}},
				{"panic", &testv1.Request{FailTimes: 1, FailCode: "panic"}},
				{"nil response", &testv1.Request{Mode: "nil"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h := newHarness(t, nil, &service{})
					ctx, header := withHeaders(t.Context())
					_, err := h.client(enc.newClient).Read(ctx, tc.req)
					te := twerr(t, err)
					env, ok := twirpadapter.EnvelopeFromError(err)
					if te.Code() != twirp.Internal || te.Msg() != middleware.ConcealedMessage || strings.Contains(err.Error(), "s3cr3t") {
						t.Errorf("error %v, want internal %q and nothing of the cause", err, middleware.ConcealedMessage)
					}
					if !ok || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Attempts != 1 {
						t.Errorf("envelope %+v (error %+v), want EXECUTION_FAILED after 1 attempt, not retryable", env, env.Error)
					}
					if header.Get(middleware.HeaderExecutionID) != env.ExecutionID {
						t.Errorf("%s header %q, meta %q: want the same execution", middleware.HeaderExecutionID, header.Get(middleware.HeaderExecutionID), env.ExecutionID)
					}
					if tc.name == "panic" && header.Get("X-Attempt") != "" {
						t.Error("a panicking attempt's headers reached the client")
					}
					if f := h.final(); tc.name == "panic" && f.Stack == "" {
						t.Error("the panic's stack is missing from the final event")
					}
				})
			}
		})
	}
}

// One request gives one input digest, whichever encoding carried it: the
// adapter binds the decoded message.
func TestInputDigestIsTheSameForBothEncodings(t *testing.T) {
	t.Parallel()
	rec := &middleware.EventRecorder{}
	h := newHarness(t, nil, &service{}, middleware.WithEventSink(rec))
	digests := map[string]string{}
	for _, enc := range encodings {
		resp, err := h.client(enc.newClient).Read(t.Context(), &testv1.Request{Id: "a", Amount: 42})
		if err != nil {
			t.Fatal(err)
		}
		h.final()
		for _, e := range rec.Execution(resp.ExecutionId) {
			if e.Type == middleware.EventRequested {
				digests[enc.name] = e.InputDigest
			}
		}
	}
	if digests["protobuf"] == "" || digests["protobuf"] != digests["json"] {
		t.Errorf("digests %v: want one, non-empty", digests)
	}
}

// A handler that relays the error of a governed service downstream relays
// its code and message, not that execution's envelope.
func TestRelayedErrorCarriesThisExecutionsEnvelope(t *testing.T) {
	t.Parallel()
	downstream := twirp.NewError(twirp.FailedPrecondition, "needs approval downstream").
		WithMeta(twirpadapter.MetaCode, "APPROVAL_REQUIRED").
		WithMeta(twirpadapter.MetaExecutionID, "exe_downstream").
		WithMeta(twirpadapter.MetaApprovalID, "apr_0123456789abcdef0123456789abcdef").
		WithMeta("hint", "ask a manager")
	svc := &service{hook: func(ctx context.Context, _ *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		_ = twirp.SetHTTPResponseHeader(ctx, middleware.HeaderApprovalID, "apr_0123456789abcdef0123456789abcdef")
		return nil, downstream
	}}
	h := newHarness(t, nil, svc)
	ctx, header := withHeaders(t.Context())
	_, err := h.client(testv1.NewTestServiceProtobufClient).Write(ctx, &testv1.Request{})
	if got := header.Get(middleware.HeaderApprovalID); got != "" {
		t.Errorf("%s = %q: the handler's copy must not pass for this execution's", middleware.HeaderApprovalID, got)
	}
	final := h.final()
	te := twerr(t, err)
	env, ok := twirpadapter.EnvelopeFromError(err)
	if te.Code() != twirp.FailedPrecondition || te.Meta("hint") != "ask a manager" {
		t.Errorf("error %v %v: want the relayed code and meta", te, te.MetaMap())
	}
	if !ok || env.ExecutionID != final.ExecutionID || env.Error.Code != middleware.CodeExecutionFailed || env.ApprovalID != "" {
		t.Errorf("envelope %+v (error %+v): want this execution %s, EXECUTION_FAILED, no approval", env, env.Error, final.ExecutionID)
	}
}

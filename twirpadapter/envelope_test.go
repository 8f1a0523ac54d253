package twirpadapter_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
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
			var resp *testv1.Response
			env, _, err := call(t.Context(), func(ctx context.Context) (err error) {
				resp, err = client.Read(ctx, &testv1.Request{Id: "a", FailTimes: 1})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if env.Status != middleware.StatusCompleted || env.ExecutionID != resp.ExecutionId || env.Attempts != 2 {
				t.Errorf("envelope %+v; want completed execution %s after 2 attempts", env, resp.ExecutionId)
			}
			h.final()

			// Ungoverned: no envelope at all.
			env, header, err := call(t.Context(), func(ctx context.Context) error {
				_, err := client.Ungoverned(ctx, &testv1.Request{})
				return err
			})
			if err != nil || env.ExecutionID != "" || header.Get(adapter.HeaderExecutionID) != "" {
				t.Errorf("an ungoverned call has envelope %+v (err %v)", env, err)
			}
			if _, err := client.Ungoverned(t.Context(), &testv1.Request{FailTimes: 1}); err == nil {
				t.Fatal("want an error")
			} else if env, ok := twirpadapter.EnvelopeFromError(err); ok {
				t.Errorf("an ungoverned error has envelope %+v", env)
			}
		})
	}
}

// A handler's own twirp.Error reaches the client as Twirp would send it
// without agentsafe: its code, message and meta, no agentsafe_ meta. The
// envelope travels in the headers alone.
func TestHandlerErrorPassesUnchanged(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, &service{})
			env, header, err := call(t.Context(), func(ctx context.Context) error {
				_, err := h.client(enc.newClient).Write(ctx, &testv1.Request{FailTimes: 1, FailCode: "not_found"})
				return err
			})
			final := h.final()
			te := twerr(t, err)
			if te.Code() != twirp.NotFound || te.Msg() != "declared by the handler" || !maps.Equal(te.MetaMap(), map[string]string{"hint": "check the id"}) {
				t.Errorf("the handler's own error became %v (meta %v): it must keep its code, message and meta, and gain nothing", te, te.MetaMap())
			}
			want := middleware.EnvelopeError{Code: middleware.CodeExecutionFailed, Message: "declared by the handler", Retryable: false}
			if env.ExecutionID != final.ExecutionID || env.Attempts != 1 || *env.Error != want {
				t.Errorf("the Recorder read %+v (error %+v); want %s after 1 attempt with %+v", env, env.Error, final.ExecutionID, want)
			}
			if header.Get(adapter.HeaderCode) != "EXECUTION_FAILED" || header.Get(adapter.HeaderRetryable) != "false" {
				t.Errorf("headers %v: want %s and %s", header, adapter.HeaderCode, adapter.HeaderRetryable)
			}
			if env, ok := twirpadapter.EnvelopeFromError(err); ok {
				t.Errorf("EnvelopeFromError found %+v in a handler's own error", env)
			}
		})
	}
}

// Every code the engine can end with reaches a Twirp client as the code the
// table says; the envelope is in the error's meta for every outcome the
// engine decides but the caller leaving, and in the headers always. A
// handler declares each one with a *middleware.Error, which keeps its code.
func TestCodesOnTheWire(t *testing.T) {
	t.Parallel()
	want := map[middleware.Code]twirp.ErrorCode{
		middleware.CodeTimeout:                  twirp.DeadlineExceeded,
		middleware.CodeCancelled:                twirp.Canceled,
		middleware.CodeExecutionFailed:          twirp.Internal,
		middleware.CodeResourceExhausted:        twirp.ResourceExhausted,
		middleware.CodeUnauthenticated:          twirp.Unauthenticated,
		middleware.CodeApprovalRequired:         twirp.FailedPrecondition,
		middleware.CodeApprovalPending:          twirp.FailedPrecondition,
		middleware.CodeApprovalRejected:         twirp.PermissionDenied,
		middleware.CodeApprovalExpired:          twirp.PermissionDenied,
		middleware.CodeApprovalConsumed:         twirp.PermissionDenied,
		middleware.CodeApprovalNotFound:         twirp.PermissionDenied,
		middleware.CodeApprovalInputMismatch:    twirp.PermissionDenied,
		middleware.CodeApprovalResumeMismatch:   twirp.PermissionDenied,
		middleware.CodeApprovalUnavailable:      twirp.Unavailable,
		middleware.CodeCapabilityNotFound:       twirp.NotFound,
		middleware.CodeInvalidArgument:          twirp.InvalidArgument,
		middleware.CodeAuditUnavailable:         twirp.Unavailable,
		middleware.CodeIdempotencyInFlight:      twirp.Aborted,
		middleware.CodeIdempotencyKeyReused:     twirp.FailedPrecondition,
		middleware.CodeIdempotencyInDoubt:       twirp.FailedPrecondition,
		middleware.CodeIdempotencyUnavailable:   twirp.Unavailable,
		middleware.CodePolicyDenied:             twirp.PermissionDenied,
		middleware.CodePolicyUnavailable:        twirp.Unavailable,
		middleware.CodeIdempotencyQuotaExceeded: twirp.ResourceExhausted,
		middleware.CodeBudgetExceeded:           twirp.ResourceExhausted,
		middleware.CodeBudgetUnavailable:        twirp.Unavailable,
		middleware.CodeApprovalStale:            twirp.FailedPrecondition,
		middleware.CodePreviewUnavailable:       twirp.Unavailable,
	}
	for c := middleware.CodeOK + 1; !strings.HasPrefix(c.String(), "Code("); c++ {
		if _, ok := want[c]; !ok {
			t.Fatalf("%s is missing: every code but OK needs a Twirp code", c)
		}
	}
	svc := &service{hook: func(_ context.Context, in *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		var c middleware.Code
		_ = c.UnmarshalText([]byte(in.Id))
		return nil, &middleware.Error{Code: c, Message: "declared " + in.Id}
	}}
	h := newHarness(t, nil, svc)
	client := h.client(testv1.NewTestServiceJSONClient)
	for code, twcode := range want {
		env, header, err := call(t.Context(), func(ctx context.Context) error {
			_, err := client.Write(ctx, &testv1.Request{Id: code.String()})
			return err
		})
		h.final()
		te := twerr(t, err)
		if te.Code() != twcode || te.Msg() != "declared "+code.String() || env.Error.Code != code || header.Get(adapter.HeaderCode) != code.String() {
			t.Errorf("%s reached the client as %s %q (envelope %+v), want %s", code, te.Code(), te.Msg(), env.Error, twcode)
		}
		meta, ok := twirpadapter.EnvelopeFromError(err)
		if wantMeta := code != middleware.CodeCancelled; ok != wantMeta || ok && (meta.ExecutionID != env.ExecutionID || *meta.Error != *env.Error) {
			t.Errorf("%s: the error's meta gave %+v, %t; want the envelope in meta: %t", code, meta, ok, wantMeta)
		}
	}
}

// The caller leaving is written as Twirp writes it without agentsafe:
// canceled, or deadline_exceeded when its own deadline passed, with no
// agentsafe_ meta. A handler that answers with a Twirp status because its
// context ended gave up: the outcome is the context's. In process, so the
// answer is read although the caller left.
func TestCallerLeavingOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(context.Context) (context.Context, context.CancelFunc)
		want  twirp.ErrorCode
	}{
		{"cancelled", func(ctx context.Context) (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }, twirp.Canceled},
		{"its own deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		}, twirp.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agentsafetest.Test(t, func(t *testing.T) {
				rec := &agentsafetest.Recorder{}
				eng, err := middleware.New(nil, middleware.WithEventSink(rec), middleware.WithApprovalStore(approvalstore.NewMemory()))
				if err != nil {
					t.Fatal(err)
				}
				ctx, leave := tc.leave(t.Context())
				defer leave()
				svc := &service{hook: func(hctx context.Context, _ *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
					if tc.want == twirp.Canceled {
						leave()
					}
					<-hctx.Done()
					return nil, twirp.NewError(tc.want, "gave up")
				}}
				srv := twirpadapter.Wrap(eng, func(opts ...any) testv1.TwirpServer { return testv1.NewTestServiceServer(svc, opts...) })
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, testv1.TestServicePathPrefix+"Write", strings.NewReader(`{}`))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				body, id := w.Body.String(), w.Header().Get(adapter.HeaderExecutionID)
				if !strings.Contains(body, `"code":"`+string(tc.want)+`"`) || strings.Contains(body, "agentsafe_") {
					t.Errorf("body %s: want %s and no agentsafe_ meta", body, tc.want)
				}
				if w.Header().Get(adapter.HeaderCode) != "CANCELLED" || id == "" {
					t.Errorf("headers %v: want %s CANCELLED and the execution id", w.Header(), adapter.HeaderCode)
				}
				evs, err := rec.WaitFinal(t.Context(), id)
				if err != nil || !slices.ContainsFunc(evs, func(e middleware.Event) bool {
					return e.Type == middleware.EventCancelled && e.Code == middleware.CodeCancelled
				}) {
					t.Errorf("events %v (%v): want capability.cancelled CANCELLED", evs, err)
				}
			})
		})
	}
}

// A handler returning neither a response nor an error fails, concealed,
// as Twirp would refuse it: never a completed envelope without a response.
func TestNilResponseIsConcealed(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, &service{})
			env, _, err := call(t.Context(), func(ctx context.Context) error {
				_, err := h.client(enc.newClient).Read(ctx, &testv1.Request{Mode: "nil"})
				return err
			})
			h.final()
			if te := twerr(t, err); te.Code() != twirp.Internal || te.Msg() != adapter.ConcealedMessage {
				t.Errorf("error %v, want internal %q", err, adapter.ConcealedMessage)
			}
			if env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Attempts != 1 {
				t.Errorf("envelope %+v (error %+v), want EXECUTION_FAILED after 1 attempt, not retryable", env, env.Error)
			}
		})
	}
}

// One request gives one input digest, whichever encoding carried it: the
// adapter binds the decoded message.
func TestInputDigestIsTheSameForBothEncodings(t *testing.T) {
	t.Parallel()
	rec := &agentsafetest.Recorder{}
	h := newHarness(t, nil, &service{}, middleware.WithEventSink(rec))
	digests := map[string]string{}
	for _, enc := range encodings {
		resp, err := h.client(enc.newClient).Read(t.Context(), &testv1.Request{Id: "a", Amount: 42})
		if err != nil {
			t.Fatal(err)
		}
		h.final()
		events, err := rec.WaitFinal(t.Context(), resp.ExecutionId)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
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
// its code, message and meta, not that execution's envelope: neither its
// agentsafe_ meta nor a copy of its headers.
func TestRelayedErrorCarriesThisExecutionsEnvelope(t *testing.T) {
	t.Parallel()
	downstream := twirp.NewError(twirp.FailedPrecondition, "needs approval downstream").
		WithMeta(twirpadapter.MetaCode, "APPROVAL_REQUIRED").
		WithMeta(twirpadapter.MetaExecutionID, "exe_downstream").
		WithMeta(twirpadapter.MetaApprovalID, "apr_0123456789abcdef0123456789abcdef").
		WithMeta("hint", "ask a manager")
	svc := &service{hook: func(ctx context.Context, _ *testv1.Request, _ middleware.Execution) (*testv1.Response, error) {
		_ = twirp.SetHTTPResponseHeader(ctx, adapter.HeaderApprovalID, "apr_0123456789abcdef0123456789abcdef")
		return nil, downstream
	}}
	h := newHarness(t, nil, svc)
	env, header, err := call(t.Context(), func(ctx context.Context) error {
		_, err := h.client(testv1.NewTestServiceProtobufClient).Write(ctx, &testv1.Request{})
		return err
	})
	final := h.final()
	if got := header.Get(adapter.HeaderApprovalID); got != "" {
		t.Errorf("%s = %q: the handler's copy must not pass for this execution's", adapter.HeaderApprovalID, got)
	}
	te := twerr(t, err)
	if te.Code() != twirp.FailedPrecondition || te.Msg() != "needs approval downstream" || !maps.Equal(te.MetaMap(), map[string]string{"hint": "ask a manager"}) {
		t.Errorf("error %v %v: want the relayed code, message and meta, without agentsafe_ meta", te, te.MetaMap())
	}
	if env.ExecutionID != final.ExecutionID || env.Error.Code != middleware.CodeExecutionFailed || env.ApprovalID != "" {
		t.Errorf("envelope %+v (error %+v): want this execution %s, EXECUTION_FAILED, no approval", env, env.Error, final.ExecutionID)
	}
}

// Two values of the single-valued Agentsafe-Approval-Id header are
// malformed: taking either would silently drop the other.
func TestAnApprovalHeaderSentTwiceIsInvalidArgument(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	svc := &service{hook: func(context.Context, *testv1.Request, middleware.Execution) (*testv1.Response, error) {
		runs.Add(1)
		return &testv1.Response{}, nil
	}}
	h := newHarness(t, nil, svc)
	client := h.client(testv1.NewTestServiceJSONClient)
	env, _, err := call(t.Context(), func(ctx context.Context) error {
		ctx, err := twirp.WithHTTPRequestHeaders(ctx, http.Header{adapter.HeaderApprovalID: {
			"apr_00000000000000000000000000000000", "apr_11111111111111111111111111111111"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Read(ctx, &testv1.Request{})
		return err
	})
	h.final()
	if te := twerr(t, err); te.Code() != twirp.InvalidArgument || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(te.Msg(), adapter.HeaderApprovalID) {
		t.Errorf("%s %q (envelope %+v), want invalid_argument naming %s", te.Code(), te.Msg(), env.Error, adapter.HeaderApprovalID)
	}
	if runs.Load() != 0 {
		t.Errorf("the handler ran %d times, want none", runs.Load())
	}
}

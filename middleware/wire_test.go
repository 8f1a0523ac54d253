package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

func TestEveryCodeHasAWireStatus(t *testing.T) {
	want := map[middleware.Code]struct {
		rpc  uint32
		http int
	}{
		middleware.CodeTimeout: {4, 504}, middleware.CodeCancelled: {1, 499}, middleware.CodeExecutionFailed: {13, 500},
		middleware.CodeApprovalRequired: {9, 428}, middleware.CodeApprovalPending: {9, 409}, middleware.CodeApprovalUnavailable: {14, 503},
		middleware.CodeApprovalRejected: {7, 403}, middleware.CodeApprovalExpired: {7, 403}, middleware.CodeApprovalConsumed: {7, 403},
		middleware.CodeApprovalNotFound: {7, 403}, middleware.CodeApprovalInputMismatch: {7, 403}, middleware.CodeApprovalResumeMismatch: {7, 403},
		middleware.CodeUnauthenticated: {16, 401}, middleware.CodeResourceExhausted: {8, 429}, middleware.CodeCapabilityNotFound: {5, 404},
		middleware.CodeInvalidArgument: {3, 400}, middleware.CodeOK: {0, 200},
	}
	for _, c := range middleware.Codes() {
		w, ok := want[c]
		if !ok {
			t.Errorf("code %s has no expected wire status in this test", c)
			continue
		}
		if c.RPCCode() != w.rpc || c.HTTPStatus() != w.http {
			t.Errorf("%s: RPC %d HTTP %d, want %d and %d (SPEC §6)", c, c.RPCCode(), c.HTTPStatus(), w.rpc, w.http)
		}
	}
}

func TestEnvelopeRoundTripsThroughHeadersAndJSON(t *testing.T) {
	env := middleware.Envelope{ExecutionID: "exe_1", Procedure: "/a.V1/B", Status: middleware.StatusApprovalRequired, Attempts: 0, ApprovalID: "apr_2",
		Error: &middleware.EnvelopeError{Code: middleware.CodeApprovalRequired, Message: "needs approval"}, Duration: time.Second}
	h := http.Header{}
	env.SetHeaders(h)
	got, ok := middleware.EnvelopeFromHeaders(h)
	if !ok || got.ExecutionID != "exe_1" || got.ApprovalID != "apr_2" || h.Get("Agentsafe-Attempts") != "0" {
		t.Errorf("headers %v read back as %+v", h, got)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"status":"approval_required","executionId":"exe_1","procedure":"/a.V1/B","error":{"code":"APPROVAL_REQUIRED","message":"needs approval","retryable":false},"approvalId":"apr_2"}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	var back middleware.Envelope
	if err := json.Unmarshal(b, &back); err != nil || back.Error == nil || back.Error.Code != middleware.CodeApprovalRequired || back.ApprovalID != "apr_2" || back.Status != middleware.StatusApprovalRequired {
		t.Errorf("JSON read back as %+v, %v", back, err)
	}
	if _, ok := middleware.EnvelopeFromHeaders(http.Header{}); ok {
		t.Error("empty headers read as an envelope")
	}
}

func TestOutgoingIdempotencyKeyFollowsTheLabel(t *testing.T) {
	f := newFixture(t, procRead, read(0, time.Second))
	f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if k, ok := middleware.OutgoingIdempotencyKey(ctx); !ok || k != x.IdempotencyKey {
			t.Errorf("unlabelled outgoing key %q, want the execution's %q", k, x.IdempotencyKey)
		}
		k, _ := middleware.OutgoingIdempotencyKey(middleware.WithKeyLabel(ctx, "gateway"))
		if k != x.SubKey("gateway") {
			t.Errorf("labelled key %q, want SubKey(gateway)", k)
		}
		return nil, nil
	})
	if _, ok := middleware.OutgoingIdempotencyKey(t.Context()); ok {
		t.Error("an outgoing key outside an execution")
	}
}

func TestErrorDetailRoundTrip(t *testing.T) {
	env := middleware.Envelope{ExecutionID: "exe_1", Procedure: "/a.V1/B", Status: middleware.StatusCancelled, Attempts: 2, ApprovalID: "apr_1",
		Error: &middleware.EnvelopeError{Code: middleware.CodeTimeout, Message: "attempt 2 timed out", Retryable: true}}
	back := middleware.EnvelopeFromDetail(env.ErrorDetail(), env.Error.Message)
	if back.ExecutionID != env.ExecutionID || back.Procedure != env.Procedure || back.Status != env.Status || back.Attempts != 2 ||
		back.ApprovalID != env.ApprovalID || *back.Error != *env.Error {
		t.Errorf("detail round trip: %+v, want %+v", back, env)
	}
	if (middleware.Envelope{Status: middleware.StatusCompleted}).ErrorDetail() != nil {
		t.Error("a completed envelope has no error detail")
	}
	d := env.ErrorDetail()
	d.Code = "SOMETHING_NEWER"
	if got := middleware.EnvelopeFromDetail(d, "x"); got.Error.Code != middleware.CodeExecutionFailed || got.Error.Retryable || got.Status != middleware.StatusFailed {
		t.Errorf("an unknown code must read as a non-retryable EXECUTION_FAILED: %+v", got.Error)
	}
	for c, want := range map[middleware.Code]middleware.Status{middleware.CodeOK: middleware.StatusCompleted, middleware.CodeTimeout: middleware.StatusCancelled,
		middleware.CodeCancelled: middleware.StatusCancelled, middleware.CodeApprovalRequired: middleware.StatusApprovalRequired, middleware.CodeApprovalPending: middleware.StatusFailed} {
		if got := middleware.StatusOf(c); got != want {
			t.Errorf("StatusOf(%s) = %s, want %s", c, got, want)
		}
	}
}

func TestKeyHostsListWhereKeysMayGo(t *testing.T) {
	k := middleware.NewKeyHosts("Payments.Internal", "10.0.0.7:8443", "[::1]", " ")
	for addr, want := range map[string]bool{
		"payments.internal": true, "payments.internal:443": true, "PAYMENTS.internal:9000": true,
		"10.0.0.7:8443": true, "10.0.0.7:80": false, "10.0.0.7": false,
		"[::1]:8080": true, "evil.example": false, "": false,
	} {
		if got := k.Allows(addr); got != want {
			t.Errorf("Allows(%q) = %t, want %t", addr, got, want)
		}
	}
	if (middleware.KeyHosts{}).Allows("payments.internal") {
		t.Error("no hosts listed must allow none")
	}
	f := newFixture(t, procRead, read(0, time.Second))
	f.run(t.Context(), procRead, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if key, ok := k.Key(ctx, "payments.internal:443"); !ok || key != x.IdempotencyKey {
			t.Errorf("Key to a listed host = %q, %t", key, ok)
		}
		if _, ok := k.Key(ctx, "evil.example"); ok {
			t.Error("a key for a host not listed")
		}
		return nil, nil
	})
}

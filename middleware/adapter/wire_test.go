package adapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
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
		middleware.CodeAuditUnavailable: {14, 503}, middleware.CodeIdempotencyInFlight: {10, 409}, middleware.CodeIdempotencyKeyReused: {9, 422},
		middleware.CodeIdempotencyInDoubt: {9, 409}, middleware.CodeIdempotencyUnavailable: {14, 503},
		middleware.CodePolicyDenied: {7, 403}, middleware.CodePolicyUnavailable: {14, 503},
		middleware.CodeIdempotencyQuotaExceeded: {8, 429}, middleware.CodeBudgetExceeded: {8, 429}, middleware.CodeBudgetUnavailable: {14, 503},
		middleware.CodeApprovalStale: {9, 409}, middleware.CodePreviewUnavailable: {14, 503},
	}
	for c := middleware.CodeOK; !strings.HasPrefix(c.String(), "Code("); c++ {
		w, ok := want[c]
		if !ok {
			t.Errorf("code %s has no expected wire status in this test", c)
			continue
		}
		var err error
		if c != middleware.CodeOK {
			err = middleware.NewError(c, "")
		}
		if adapter.RPCCode(err) != w.rpc || adapter.HTTPStatus(err) != w.http || adapter.CodeRPC(c) != w.rpc {
			t.Errorf("%s: RPC %d HTTP %d, want %d and %d", c, adapter.RPCCode(err), adapter.HTTPStatus(err), w.rpc, w.http)
		}
	}
}

func TestTheCallersOwnDeadlineIsWrittenDeadlineExceeded(t *testing.T) {
	err := &middleware.Error{Code: middleware.CodeCancelled, Cause: fmt.Errorf("%w: the caller's", context.DeadlineExceeded)}
	if adapter.RPCCode(err) != 4 || adapter.HTTPStatus(err) != http.StatusGatewayTimeout {
		t.Errorf("a caller's own deadline: RPC %d HTTP %d, want DeadlineExceeded (4) and 504", adapter.RPCCode(err), adapter.HTTPStatus(err))
	}
	cancel := &middleware.Error{Code: middleware.CodeCancelled, Cause: context.Canceled}
	if adapter.RPCCode(cancel) != 1 || adapter.HTTPStatus(cancel) != 499 {
		t.Errorf("a cancellation: RPC %d HTTP %d, want Canceled (1) and 499", adapter.RPCCode(cancel), adapter.HTTPStatus(cancel))
	}
}

func TestEnvelopeRoundTripsThroughHeadersAndJSON(t *testing.T) {
	env := middleware.Envelope{ExecutionID: "exe_1", Procedure: "/a.V1/B", Status: middleware.StatusApprovalRequired, Attempts: 0, ApprovalID: "apr_2",
		Error: &middleware.EnvelopeError{Code: middleware.CodeApprovalRequired, Message: "needs approval"}, Duration: time.Second}
	h := http.Header{adapter.HeaderExecutionID: {"exe_relayed"}, "Agentsafe-code": {"TIMEOUT"}}
	adapter.SetHeaders(h, env)
	got, ok := adapter.ReadHeaders(h)
	if !ok || got.ExecutionID != "exe_1" || got.ApprovalID != "apr_2" || h.Get(adapter.HeaderAttempts) != "0" ||
		got.Error == nil || got.Error.Code != middleware.CodeApprovalRequired || got.Status != middleware.StatusApprovalRequired ||
		len(h.Values(adapter.HeaderExecutionID)) != 1 || h.Get(adapter.HeaderRetryable) != "false" {
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
	if _, ok := adapter.ReadHeaders(http.Header{}); ok {
		t.Error("empty headers read as an envelope")
	}
	h = http.Header{}
	adapter.SetHeaders(h, middleware.Envelope{})
	if len(h) != 0 {
		t.Errorf("an ungoverned call's zero envelope wrote %v", h)
	}
}

func TestErrorDetailRoundTrip(t *testing.T) {
	env := middleware.Envelope{ExecutionID: "exe_1", Procedure: "/a.V1/B", Status: middleware.StatusCancelled, Attempts: 2, ApprovalID: "apr_1",
		Error: &middleware.EnvelopeError{Code: middleware.CodeTimeout, Message: "attempt 2 timed out", Retryable: true}}
	back := adapter.EnvelopeFromDetail(adapter.ErrorDetail(env), env.Error.Message)
	if back.ExecutionID != env.ExecutionID || back.Procedure != env.Procedure || back.Status != env.Status || back.Attempts != 2 ||
		back.ApprovalID != env.ApprovalID || *back.Error != *env.Error {
		t.Errorf("detail round trip: %+v, want %+v", back, env)
	}
	if adapter.ErrorDetail(middleware.Envelope{Status: middleware.StatusCompleted}) != nil {
		t.Error("a completed envelope has no error detail")
	}
	d := adapter.ErrorDetail(env)
	d.Code = "SOMETHING_NEWER"
	if got := adapter.EnvelopeFromDetail(d, "x"); got.Error.Code != middleware.CodeExecutionFailed || got.Error.Retryable || got.Status != middleware.StatusFailed {
		t.Errorf("an unknown code must read as a non-retryable EXECUTION_FAILED: %+v", got.Error)
	}
	for c, want := range map[middleware.Code]middleware.Status{middleware.CodeOK: middleware.StatusCompleted, middleware.CodeTimeout: middleware.StatusCancelled,
		middleware.CodeCancelled: middleware.StatusCancelled, middleware.CodeApprovalRequired: middleware.StatusApprovalRequired, middleware.CodeApprovalPending: middleware.StatusFailed} {
		if got := c.Status(); got != want {
			t.Errorf("%s.Status() = %s, want %s", c, got, want)
		}
	}
}

func TestKeyHostsListWhereKeysMayGo(t *testing.T) {
	k := adapter.NewKeyHosts("Payments.Internal", "10.0.0.7:8443", "[::1]", " ")
	for addr, want := range map[string]bool{
		"payments.internal": true, "payments.internal:443": true, "PAYMENTS.internal:9000": true,
		"10.0.0.7:8443": true, "10.0.0.7:80": false, "10.0.0.7": false,
		"[::1]:8080": true, "[::1]": true, "evil.example": false, "": false,
	} {
		if got := k.Allows(addr); got != want {
			t.Errorf("Allows(%q) = %t, want %t", addr, got, want)
		}
	}
	if (adapter.KeyHosts{}).Allows("payments.internal") {
		t.Error("no hosts listed must allow none")
	}
	run(t, func(ctx context.Context) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if key, ok := k.Key(ctx, "payments.internal:443"); !ok || key != `"`+x.IdempotencyKey+`"` {
			t.Errorf("Key to a listed host = %q, %t", key, ok)
		}
		if _, ok := k.Key(ctx, "evil.example"); ok {
			t.Error("a key for a host not listed")
		}
	})
}

func TestOutgoingKeyFollowsTheLabel(t *testing.T) {
	run(t, func(ctx context.Context) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if k, ok := adapter.OutgoingKey(ctx); !ok || k != x.IdempotencyKey {
			t.Errorf("unlabelled outgoing key %q, want the execution's %q", k, x.IdempotencyKey)
		}
		k, _ := adapter.OutgoingKey(middleware.WithKeyLabel(ctx, "gateway"))
		if k != x.SubKey("gateway") {
			t.Errorf("labelled key %q, want SubKey(gateway)", k)
		}
	})
	if _, ok := adapter.OutgoingKey(t.Context()); ok {
		t.Error("an outgoing key outside an execution")
	}
}

// run runs fn as the handler of one governed read.
func run(t *testing.T, fn func(ctx context.Context)) {
	t.Helper()
	eng, err := middleware.New(middleware.NewRegistry().Register("read", middleware.Capability{SideEffect: middleware.SideEffectRead}))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = adapter.Execute(t.Context(), adapter.Resolve(eng, "read"), adapter.Call[any]{}, func(ctx context.Context) (any, error) {
		fn(ctx)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestQuoteKeyIsAnSFString(t *testing.T) {
	for key, want := range map[string]string{
		"idk_0123":   `"idk_0123"`,
		`a"b\c`:      `"a\"b\\c"`,
		"with space": `"with space"`,
	} {
		if got := adapter.QuoteKey(key); got != want {
			t.Errorf("QuoteKey(%q) = %s, want %s", key, got, want)
		}
	}
}

func TestCallerKeyTellsAnEmptyKeyFromNone(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, ""},
		{[]string{"k"}, "k"},
		{[]string{`"k"`}, `"k"`},
		{[]string{"a", "b"}, "a, b"},
		{[]string{""}, `""`},
		{[]string{" "}, `""`},
		{[]string{"", ""}, `""`},
		{[]string{"a", ""}, `""`}, // never the bare token "a,"
	} {
		if got := adapter.CallerKey(tc.values); got != tc.want {
			t.Errorf("CallerKey(%q) = %q, want %q: an empty key is malformed, not absent", tc.values, got, tc.want)
		}
	}
}

// TestErrorDetailCarriesTheApprovalHints: on APPROVAL_REQUIRED the detail
// carries approval_url and expires_at (RFC 3339), and reads back.
func TestErrorDetailCarriesTheApprovalHints(t *testing.T) {
	expires := time.Date(2026, 12, 3, 15, 30, 0, 0, time.FixedZone("CET", 3600))
	env := middleware.Envelope{ExecutionID: "exe_1", Status: middleware.StatusApprovalRequired, ApprovalID: "apr_1",
		ApprovalURL: "https://console.example/approvals/apr_1", ExpiresAt: expires,
		Error: &middleware.EnvelopeError{Code: middleware.CodeApprovalRequired, Message: "needs an approval", Retryable: true}}
	d := adapter.ErrorDetail(env)
	if d.GetApprovalUrl() != env.ApprovalURL || d.GetExpiresAt() != "2026-12-03T14:30:00Z" {
		t.Errorf("the detail must carry approval_url and expires_at (RFC 3339, UTC): %q, %q", d.GetApprovalUrl(), d.GetExpiresAt())
	}
	back := adapter.EnvelopeFromDetail(d, env.Error.Message)
	if back.ApprovalURL != env.ApprovalURL || !back.ExpiresAt.Equal(expires) {
		t.Errorf("the hints must read back from the detail: %q, %v", back.ApprovalURL, back.ExpiresAt)
	}
	h := http.Header{}
	adapter.SetHeaders(h, env)
	if h.Get(adapter.HeaderApprovalURL) != env.ApprovalURL || h.Get(adapter.HeaderApprovalExpires) != "2026-12-03T14:30:00Z" {
		t.Errorf("the headers must carry the hints: %v", h)
	}
}

// A handler that writes an envelope header under a key that is not in
// canonical form (w.Header()["agentsafe-code"] = ...) must not shadow the
// envelope either: clients canonicalize what they receive, so a success
// would read as that code.
func TestEnvelopeHeadersAreReplacedInAnySpelling(t *testing.T) {
	h := http.Header{"agentsafe-code": {"TIMEOUT"}, "AGENTSAFE-EXECUTION-ID": {"exe_relayed"}, "X-Own": {"kept"}}
	adapter.SetHeaders(h, middleware.Envelope{ExecutionID: "exe_1", Status: middleware.StatusCompleted, Attempts: 1})
	want := http.Header{adapter.HeaderExecutionID: {"exe_1"}, adapter.HeaderAttempts: {"1"}, "X-Own": {"kept"}}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v", h, want)
	}
	h = http.Header{"agentsafe-replayed": {"true"}, "X-Own": {"kept"}}
	adapter.DelHeaders(h)
	if len(h) != 1 || h.Get("X-Own") != "kept" {
		t.Errorf("DelHeaders left %v", h)
	}
	// Every envelope header in canonical form, as a handler's Set writes it.
	h = http.Header{"X-Own": {"kept"}, adapter.HeaderRetryAfter: {"3"}}
	for _, k := range []string{adapter.HeaderExecutionID, adapter.HeaderAttempts, adapter.HeaderApprovalID, adapter.HeaderCode,
		adapter.HeaderRetryable, adapter.HeaderReplayed, adapter.HeaderApprovalURL, adapter.HeaderApprovalExpires} {
		h.Set(k, "relayed")
	}
	adapter.DelHeaders(h)
	if len(h) != 2 || h.Get("X-Own") != "kept" || h.Get(adapter.HeaderRetryAfter) != "3" {
		t.Errorf("DelHeaders left %v, want only X-Own and Retry-After (not an envelope header)", h)
	}
}

// Adapters read the request's headers by these names directly, as the
// server stores them (canonical), without canonicalizing them on every call.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, k := range []string{adapter.HeaderExecutionID, adapter.HeaderAttempts, adapter.HeaderApprovalID, adapter.HeaderCode,
		adapter.HeaderRetryable, adapter.HeaderIdempotencyKey, adapter.HeaderReplayed, adapter.HeaderApprovalURL,
		adapter.HeaderApprovalExpires, adapter.HeaderRetryAfter} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header name %q is not canonical (%q): a lookup by it would miss the header", k, c)
		}
	}
}

// SetMetadata writes what SetHeaders does under lower-case names, and
// the values of both share one array without one append overwriting the
// next header's value.
func TestSetMetadataIsTheHeadersInLowerCase(t *testing.T) {
	env := middleware.Envelope{ExecutionID: "exe_1", Attempts: 2, ApprovalID: "apr_2", Replayed: true,
		ExpiresAt: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), ApprovalURL: "https://a.example/approvals/apr_2",
		Error: &middleware.EnvelopeError{Code: middleware.CodeTimeout, Retryable: true}}
	h := http.Header{}
	adapter.SetHeaders(h, env)
	md := map[string][]string{}
	adapter.SetMetadata(md, env)
	if len(md) != len(h) || len(h) != 8 {
		t.Fatalf("metadata %v, headers %v: want the same 8", md, h)
	}
	for k, v := range h {
		if got := md[strings.ToLower(k)]; len(got) != 1 || got[0] != v[0] || len(v) != 1 {
			t.Errorf("%s: metadata %q, header %q", k, got, v)
		}
	}
	h[adapter.HeaderExecutionID] = append(h[adapter.HeaderExecutionID], "exe_other")
	if h.Get(adapter.HeaderAttempts) != "2" {
		t.Errorf("appending to one header changed the next: attempts %q", h.Get(adapter.HeaderAttempts))
	}
	md = map[string][]string{}
	adapter.SetMetadata(md, middleware.Envelope{})
	if len(md) != 0 {
		t.Errorf("a zero envelope wrote %v", md)
	}
}

// Envelope header names match in any ASCII case, and only so: a name with
// a rune that Unicode folds to an ASCII letter is another header.
func TestIsEnvelopeHeaderFoldsASCIIOnly(t *testing.T) {
	for _, name := range []string{"Agentsafe-Code", "agentsafe-code", "AGENTSAFE-CODE", "aGeNtSaFe-ExEcUtIoN-iD"} {
		if !adapter.IsEnvelopeHeader(name) {
			t.Errorf("%q is an envelope header", name)
		}
	}
	for _, name := range []string{"Agent\u017fafe-Code", "Agentsafe-Code-", "Agentsafe-Cod", "Content-Type"} {
		if adapter.IsEnvelopeHeader(name) {
			t.Errorf("%q is not an envelope header", name)
		}
	}
}

package nethttpadapter_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// The engine binds what the adapter hands it: method, path, query, the
// bound headers, and the body, canonical for JSON. Events carry the digest.
func TestInputDigest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, middleware.NewRegistry().Register("w", middleware.Capability{SideEffect: middleware.SideEffectWrite}), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "w", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nethttpadapter.WithBoundHeaders("x-tenant"))
	})
	digest := func(path, contentType, tenant, other, body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Tenant", tenant)
		req.Header.Set("X-Other", other)
		h.do(req)
		f := h.final()
		for _, e := range h.rec.Execution(f.ExecutionID) {
			if e.Type == middleware.EventRequested {
				return e.InputDigest
			}
		}
		t.Fatal("no requested event")
		return ""
	}
	base := digest("/a?x=1&y=2", "application/json", "t1", "o1", `{"amount":42,"currency":"EUR"}`)
	if base == "" {
		t.Fatal("no input digest on events")
	}
	same := []struct{ name, path, ct, tenant, other, body string }{
		{"JSON canonicalized: key order and whitespace", "/a?y=2&x=1", "application/json; charset=utf-8", "t1", "o1", "{ \"currency\": \"EUR\",\n \"amount\": 42 }"},
		{"headers not bound are not part of the input", "/a?x=1&y=2", "application/json", "t1", "o2", `{"amount":42,"currency":"EUR"}`},
	}
	for _, tc := range same {
		if got := digest(tc.path, tc.ct, tc.tenant, tc.other, tc.body); got != base {
			t.Errorf("%s: digest %s, want %s", tc.name, got, base)
		}
	}
	differs := []struct{ name, path, ct, tenant, other, body string }{
		{"a bound header", "/a?x=1&y=2", "application/json", "t2", "o1", `{"amount":42,"currency":"EUR"}`},
		{"the path", "/b?x=1&y=2", "application/json", "t1", "o1", `{"amount":42,"currency":"EUR"}`},
		{"the query", "/a?x=1&y=3", "application/json", "t1", "o1", `{"amount":42,"currency":"EUR"}`},
		{"the body", "/a?x=1&y=2", "application/json", "t1", "o1", `{"amount":43,"currency":"EUR"}`},
		{"a body that is not JSON: bytes as sent", "/a?x=1&y=2", "text/plain", "t1", "o1", `{"amount":42,"currency":"EUR"}`},
	}
	for _, tc := range differs {
		if got := digest(tc.path, tc.ct, tc.tenant, tc.other, tc.body); got == base {
			t.Errorf("%s: the digest did not change", tc.name)
		}
	}
}

package nethttpadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// TestAHiddenRouteIsTheMuxs404 compares, byte for byte, what a hidden
// route answers with what a mux answers for a path it routes nowhere: in
// every shape a route is served (Wrap, WrapMux, buffered, stream mode,
// and a body refused over the limit), hidden by a policy or by its
// exposure.
func TestAHiddenRouteIsTheMuxs404(t *testing.T) {
	want := httptest.NewRecorder()
	http.NewServeMux().ServeHTTP(want, httptest.NewRequest(http.MethodPost, "/refund", nil))
	ran := false
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran = true; w.Write([]byte("refunded")) })
	for _, tc := range []struct {
		name   string
		c      middleware.Capability
		policy bool
		mount  func(eng *middleware.Engine) http.Handler
		body   string
	}{
		{"Wrap, hidden by a policy", middleware.Capability{SideEffect: middleware.SideEffectWrite}, true,
			func(eng *middleware.Engine) http.Handler { return nethttpadapter.Wrap(eng, "POST /refund", handler) }, `{}`},
		{"Wrap, exposed on mcp only", middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceMCP}}, false,
			func(eng *middleware.Engine) http.Handler { return nethttpadapter.Wrap(eng, "POST /refund", handler) }, `{}`},
		{"Wrap, a body over the limit", middleware.Capability{SideEffect: middleware.SideEffectWrite, Exposure: []middleware.Surface{middleware.SurfaceRPC}}, false,
			func(eng *middleware.Engine) http.Handler {
				return nethttpadapter.Wrap(eng, "POST /refund", handler, nethttpadapter.WithMaxBodyBytes(4))
			}, `{"amount": 1}`},
		{"Wrap, hidden by a policy, a body over the limit", middleware.Capability{SideEffect: middleware.SideEffectWrite}, true,
			func(eng *middleware.Engine) http.Handler {
				return nethttpadapter.Wrap(eng, "POST /refund", handler, nethttpadapter.WithMaxBodyBytes(4))
			}, `{"amount": 1}`},
		{"WrapMux, hidden by a policy", middleware.Capability{SideEffect: middleware.SideEffectWrite}, true,
			func(eng *middleware.Engine) http.Handler {
				mux := http.NewServeMux()
				mux.Handle("POST /refund", handler)
				return nethttpadapter.WrapMux(eng, mux)
			}, `{}`},
		{"stream mode", middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true}, true,
			func(eng *middleware.Engine) http.Handler { return nethttpadapter.Wrap(eng, "POST /refund", handler) }, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran = false
			var opts []middleware.Option
			if tc.policy {
				opts = append(opts, middleware.WithPolicy(fixture.HideAll{}))
			}
			eng := agentsafetest.NewEngine(t, middleware.NewRegistry().Register("POST /refund", tc.c), append(opts, middleware.WithProtoFiles(nil))...)
			got := httptest.NewRecorder()
			tc.mount(eng.Engine).ServeHTTP(got, httptest.NewRequest(http.MethodPost, "/refund", strings.NewReader(tc.body)))
			if got.Code != want.Code || got.Body.String() != want.Body.String() || ran {
				t.Fatalf("got %d %q (handler ran: %t), want the mux's %d %q", got.Code, got.Body.String(), ran, want.Code, want.Body.String())
			}
			if len(got.Header()) != len(want.Header()) {
				t.Errorf("headers %v, want the mux's %v", got.Header(), want.Header())
			}
			for k, v := range want.Header() {
				if g := got.Header().Values(k); strings.Join(g, ",") != strings.Join(v, ",") {
					t.Errorf("header %s: %q, want the mux's %q", k, g, v)
				}
			}
		})
	}
}

// TestAHiddenPatternIsAbsentForEveryMethod: WrapMux answers a request
// whose path a hidden pattern matches as the mux would with that pattern
// removed: a 404 for any method when no visible pattern routes the path,
// and a 405 whose Allow lists the visible patterns' methods only — never
// the hidden route's method.
func TestAHiddenPatternIsAbsentForEveryMethod(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("served")) })
	reg := middleware.NewRegistry().
		Register("POST /admin/refund", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register("DELETE /admin/orders/{id}", middleware.Capability{SideEffect: middleware.SideEffectDestructive}).
		Register("GET /admin/orders/{id}", middleware.Capability{SideEffect: middleware.SideEffectRead})
	hideAdminWrites := policy(func(in middleware.PolicyInput) middleware.PolicyDecision {
		if in.Capability.SideEffect.WriteLike() {
			return middleware.Hide()
		}
		return middleware.Allow()
	})
	eng := agentsafetest.NewEngine(t, reg, middleware.WithProtoFiles(nil), middleware.WithPolicy(hideAdminWrites))
	mux := http.NewServeMux()
	for _, p := range []string{"POST /admin/refund", "DELETE /admin/orders/{id}", "GET /admin/orders/{id}", "PUT /admin/orders/{id}"} {
		mux.Handle(p, ok)
	}
	wrapped := nethttpadapter.WrapMux(eng.Engine, mux)
	// The mux with the hidden patterns removed.
	without := http.NewServeMux()
	for _, p := range []string{"GET /admin/orders/{id}", "PUT /admin/orders/{id}"} {
		without.Handle(p, ok)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/admin/refund"},
		{http.MethodPost, "/admin/refund"},
		{http.MethodOptions, "/admin/refund"},
		{http.MethodDelete, "/admin/orders/7"},
		{http.MethodPatch, "/admin/orders/7"},
		{http.MethodGet, "/admin/orders/7"},
		{http.MethodHead, "/admin/orders/7"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			got, want := httptest.NewRecorder(), httptest.NewRecorder()
			wrapped.ServeHTTP(got, httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}")))
			without.ServeHTTP(want, httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}")))
			if tc.path == "/admin/orders/7" && (tc.method == http.MethodGet || tc.method == http.MethodHead) {
				// A visible governed route: served, with its envelope.
				if got.Code != http.StatusOK || got.Header().Get(adapter.HeaderExecutionID) == "" {
					t.Fatalf("got %d %v", got.Code, got.Header())
				}
				return
			}
			if got.Code != want.Code || got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) {
				t.Fatalf("got %d %v %q, want the mux without the hidden patterns: %d %v %q",
					got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
			}
		})
	}
}

// policy is a test policy from a function.
type policy func(middleware.PolicyInput) middleware.PolicyDecision

func (policy) Name() string { return "test-policy" }
func (p policy) Decide(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return p(in), nil
}

// TestAHiddenRouteReadsNothingOfTheRequest: hiding is decided before the
// body is read, as a mux answering a path it routes nowhere reads none of
// it (what is left unread decides whether net/http keeps the connection),
// in every shape a route is served.
func TestAHiddenRouteReadsNothingOfTheRequest(t *testing.T) {
	eng := agentsafetest.NewEngine(t, middleware.NewRegistry().Register("POST /refund", middleware.Capability{SideEffect: middleware.SideEffectWrite}),
		middleware.WithProtoFiles(nil), middleware.WithPolicy(fixture.HideAll{}))
	ran := false
	handler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })
	mux := http.NewServeMux()
	mux.Handle("POST /refund", handler)
	for name, h := range map[string]http.Handler{
		"Wrap":    nethttpadapter.Wrap(eng.Engine, "POST /refund", handler),
		"WrapMux": nethttpadapter.WrapMux(eng.Engine, mux),
	} {
		t.Run(name, func(t *testing.T) {
			body := &watchedBody{Reader: strings.NewReader(`{"amount": 1}`)}
			r := httptest.NewRequest(http.MethodPost, "/refund", body)
			r.Header.Set(adapter.HeaderApprovalID, "x")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusNotFound || body.read || ran {
				t.Fatalf("got %d, body read %t, handler ran %t: a hidden route reads nothing", w.Code, body.read, ran)
			}
		})
	}
}

// watchedBody is a request body that tells whether it was read.
type watchedBody struct {
	io.Reader
	read bool
}

func (b *watchedBody) Read(p []byte) (int, error) { b.read = true; return b.Reader.Read(p) }

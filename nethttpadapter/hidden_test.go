package nethttpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// hideAll hides every call.
type hideAll struct{}

func (hideAll) Name() string { return "hide-all" }
func (hideAll) Decide(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return middleware.Hide(), nil
}

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
				opts = append(opts, middleware.WithPolicy(hideAll{}))
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

package nethttpadapter_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	_ "github.com/agentsafe/agentsafe/internal/testproto/testv1" // registers the test service's method options
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The capability of a route comes from the engine: a protobuf method option
// when the route is named after the method, replaced as a whole by a
// registry entry; or the registry entry of a ServeMux pattern.
func TestMetadataFromOptionsAndRegistry(t *testing.T) {
	t.Parallel()
	const read = "/agentsafe.test.v1.TestService/Read" // option: at most 3 runs
	const slow = "/agentsafe.test.v1.TestService/Slow" // option: 50ms per attempt

	t.Run("method option", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		h := newHarness(t, nil, func(eng *middleware.Engine) http.Handler {
			return nethttpadapter.Wrap(eng, read, scripted(&runs, 503, 503, 503, 503))
		}, fromOptions()...)
		resp, _ := h.post("/", "", "")
		if n := runs.Load(); n != 3 || resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%d runs, status %d; want the option's 3 runs", n, resp.StatusCode)
		}
	})

	t.Run("registry overrides the option", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		reg := middleware.NewRegistry().Register(read, middleware.Capability{SideEffect: middleware.SideEffectRead})
		h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
			return nethttpadapter.Wrap(eng, read, scripted(&runs, 503, 503, 503, 503))
		}, fromOptions()...)
		h.post("/", "", "")
		if n := runs.Load(); n != 1 {
			t.Errorf("%d runs, want 1: the registry entry (no retry) replaces the option", n)
		}
	})

	t.Run("option timeout", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nil, func(eng *middleware.Engine) http.Handler {
			return nethttpadapter.Wrap(eng, slow, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			}))
		}, fromOptions()...)
		start := time.Now()
		resp, _ := h.post("/", "", "")
		if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > guard/2 {
			t.Errorf("status %d after %s, want 504 after the option's 50ms", resp.StatusCode, time.Since(start))
		}
	})

	t.Run("ServeMux pattern", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		reg := middleware.NewRegistry().Register("POST /items/{id}", middleware.Capability{
			SideEffect: middleware.SideEffectRead, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond},
		})
		h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				x, _ := middleware.ExecutionFromContext(r.Context())
				if x.Attempt == 1 {
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				fmt.Fprintf(w, "%s %s %s", x.Procedure, r.Pattern, r.PathValue("id"))
			})
			return nethttpadapter.WrapMux(eng, mux)
		}, fromOptions()...)
		resp, body := h.post("/items/42", "", "")
		want := "POST /items/{id} POST /items/{id} 42"
		if resp.StatusCode != http.StatusOK || body != want || runs.Load() != 2 {
			t.Errorf("response %d %q after %d runs, want %q after 2", resp.StatusCode, body, runs.Load(), want)
		}
	})
}

// fromOptions builds the engine from the linked method options, whose test
// service includes an approval-gated method: it needs a store.
func fromOptions() []middleware.Option {
	return []middleware.Option{middleware.WithProtoFiles(protoregistry.GlobalFiles), middleware.WithApprovalStore(approvalstore.NewMemory())}
}

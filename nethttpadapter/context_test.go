package nethttpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// A net/http handler cannot return an error: one that returns because its
// context ended, writing nothing, 499 or 504, gave up; it did not succeed
// with an empty 200 nor fail on its own. The handler ends its caller's
// context itself and returns at once, so its answer usually reaches the
// engine before the engine sees the context end; every round must be
// CANCELLED, written as 499 with the envelope's headers and no body: the
// caller has left.
func TestHandlerGivingUpWithItsContextIsTheContextsOutcome(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, read(middleware.Capability{}))
	type cancelKey struct{}
	giveUp := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			r.Context().Value(cancelKey{}).(context.CancelFunc)()
			if status != 0 {
				http.Error(w, r.Context().Err().Error(), status)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"returns without writing", giveUp(0)},
		{"answers 499", giveUp(499)},
		{"answers 504", giveUp(http.StatusGatewayTimeout)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nethttpadapter.Wrap(eng, "r", tc.handler)
			for range 50 {
				ctx, cancel := context.WithCancel(t.Context())
				ctx = context.WithValue(ctx, cancelKey{}, context.CancelFunc(cancel))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
				env, _ := nethttpadapter.EnvelopeFromResponse(rec.Result())
				if rec.Code != 499 || env.Error == nil || env.Error.Code != middleware.CodeCancelled || env.Status != middleware.StatusCancelled || rec.Body.Len() != 0 {
					t.Fatalf("status %d, envelope %+v, body %q; want 499 CANCELLED without a body", rec.Code, env, rec.Body)
				}
			}
		})
	}
}

// The caller's own deadline is CANCELLED, written as every gRPC server
// reports it: 504, with Agentsafe-Code CANCELLED and no body.
func TestTheCallersDeadlineIsWrittenAs504(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t, read(middleware.Capability{Timeout: time.Minute}))
		h := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		env, _ := nethttpadapter.EnvelopeFromResponse(rec.Result())
		if rec.Code != http.StatusGatewayTimeout || rec.Header().Get(adapter.HeaderCode) != "CANCELLED" || env.Error == nil || env.Error.Code != middleware.CodeCancelled || rec.Body.Len() != 0 {
			t.Errorf("status %d, header %v, body %q; want 504, Agentsafe-Code CANCELLED and no body", rec.Code, rec.Header(), rec.Body)
		}
	})
}

// A handler that ignores its context and returns late without writing has
// succeeded, as net/http's implicit 200 says: the effect may have landed
// after the caller was told TIMEOUT, so capability.abandoned_result reports
// it — while one that gives up on time without writing ends TIMEOUT.
func TestALateHandlerThatWroteNothingSucceededLate(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		rec := &agentsafetest.Recorder{}
		eng := newEngine(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second}, middleware.WithEventSink(rec))
		h := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Second) // ignores its context, then returns: an implicit 200
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
		if w.Code != http.StatusGatewayTimeout {
			t.Fatalf("status %d, want 504 at the deadline", w.Code)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		evs := rec.Events()
		last := evs[len(evs)-1]
		if last.Type != middleware.EventAbandonedResult || !last.Succeeded {
			t.Fatalf("last event %s (succeeded %t), want a succeeded capability.abandoned_result", last.Type, last.Succeeded)
		}
	})
}

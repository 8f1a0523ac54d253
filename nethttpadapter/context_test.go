package nethttpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// A net/http handler cannot return an error: one that returns because its
// context ended, writing nothing or a 5xx, gave up; it did not succeed with
// an empty 200 nor fail on its own. The handler ends its caller's context
// itself and returns at once, so its answer usually reaches the engine
// before the engine sees the context end; every round must be CANCELLED.
func TestHandlerGivingUpWithItsContextIsTheContextsOutcome(t *testing.T) {
	t.Parallel()
	eng, err := middleware.New(middleware.NewRegistry().Register("r", read(middleware.Capability{})), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	type cancelKey struct{}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"returns without writing", func(w http.ResponseWriter, r *http.Request) {
			r.Context().Value(cancelKey{}).(context.CancelFunc)()
		}},
		{"answers 503", func(w http.ResponseWriter, r *http.Request) {
			r.Context().Value(cancelKey{}).(context.CancelFunc)()
			http.Error(w, r.Context().Err().Error(), http.StatusServiceUnavailable)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nethttpadapter.Wrap(eng, "r", tc.handler)
			for range 50 {
				ctx, cancel := context.WithCancel(t.Context())
				ctx = context.WithValue(ctx, cancelKey{}, context.CancelFunc(cancel))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
				env, _ := nethttpadapter.EnvelopeFromResponse(rec.Result())
				if rec.Code != middleware.CodeCancelled.HTTPStatus() || env.Error == nil || env.Error.Code != middleware.CodeCancelled {
					t.Fatalf("status %d, envelope %+v; want 499 CANCELLED", rec.Code, env)
				}
			}
		})
	}
}

// On a fake clock, in process: an attempt's timeout is the capability's,
// and a handler honouring it ends TIMEOUT, 504, retryable for a read.
func TestAttemptTimeoutOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cap := read(middleware.Capability{Timeout: time.Minute})
		eng, err := middleware.New(middleware.NewRegistry().Register("r", cap), middleware.WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		h := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		env, _ := nethttpadapter.EnvelopeFromResponse(rec.Result())
		if rec.Code != http.StatusGatewayTimeout || env.Error == nil || env.Error.Code != middleware.CodeTimeout || !env.Error.Retryable {
			t.Errorf("status %d, envelope error %+v; want 504 TIMEOUT, retryable", rec.Code, env.Error)
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("answered after %s, want the attempt timeout of 1m", d)
		}
	})
}

// A handler that ignores its context and returns late without writing has
// succeeded, as net/http's implicit 200 says: the effect may have landed
// after the caller was told TIMEOUT, so capability.abandoned_result reports
// it — while one that gives up on time without writing ends TIMEOUT.
func TestALateHandlerThatWroteNothingSucceededLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &middleware.EventRecorder{}
		cap := middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second}
		eng, err := middleware.New(middleware.NewRegistry().Register("refund", cap), middleware.WithEventSink(rec), middleware.WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		h := nethttpadapter.Wrap(eng, "refund", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

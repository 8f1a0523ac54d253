package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// TestRun runs the example end to end: it fails if a call does not come
// back as the example expects.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}

// TestALostRefundReplyIsRetriedUnderOneKey serves the routes in process on
// the test kit's engine, in a synctest bubble: the backoff takes no real
// time, and the audit trail shows the retry.
func TestALostRefundReplyIsRetriedUnderOneKey(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := agentsafetest.NewEngine(t, registry(), middleware.WithProtoFiles(nil))
		svc := orders.New()
		svc.Gateway.LoseReplies.Store(1)
		w := httptest.NewRecorder()
		routes(eng.Engine, svc).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders/44/refund", strings.NewReader(`{"amountCents": 5000}`)))
		env, ok := nethttpadapter.EnvelopeFromResponse(w.Result())
		if !ok || w.Code != http.StatusOK || env.Attempts != 2 || svc.Gateway.Refunds() != 1 {
			t.Fatalf("status %d, envelope %+v, %d gateway refunds", w.Code, env, svc.Gateway.Refunds())
		}
		events, err := eng.Recorder.WaitFinal(t.Context(), env.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		var types []middleware.EventType
		for _, e := range events {
			types = append(types, e.Type)
		}
		want := []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventRetried, middleware.EventCompleted}
		if !slices.Equal(types, want) {
			t.Errorf("audit trail %v, want %v", types, want)
		}
	})
}

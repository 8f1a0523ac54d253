package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

// TestRun runs the example end to end: it fails if a call does not come
// back as the example expects.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}

var (
	agent   = middleware.Actor{ID: "support-agent-7", Tenant: "shop", Kind: "agent"}
	manager = middleware.Actor{ID: "manager-bob", Tenant: "shop", Kind: "user"}
)

// TestARejectedCancellationNeverRuns serves the service in process on the
// test kit's engine, in a synctest bubble, and rejects the cancellation's
// approval with the kit's probe.
func TestARejectedCancellationNeverRuns(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := agentsafetest.NewEngine(t, nil, middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
		svc := orders.New()
		client := ordersv1.NewOrderServiceProtobufClient("http://orders.test", &http.Client{Transport: twirpadapter.Transport(inProcess{server(eng.Engine, svc)})})
		cancel := func(approvalID string) middleware.Envelope {
			ctx, rec := twirpadapter.RecordEnvelope(t.Context())
			if approvalID != "" {
				ctx, _ = twirp.WithHTTPRequestHeaders(ctx, http.Header{adapter.HeaderApprovalID: {approvalID}})
			}
			_, err := client.CancelOrder(ctx, &ordersv1.CancelOrderRequest{OrderId: "42"})
			env, _ := rec.Envelope(err)
			return env
		}
		env := cancel("")
		if env.Error == nil || env.Error.Code != middleware.CodeApprovalRequired {
			t.Fatalf("a cancellation: %+v", env)
		}
		approval, err := eng.PendingApproval(t.Context(), env.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := approval.Reject(t.Context(), manager); err != nil {
			t.Fatal(err)
		}
		if resumed := cancel(env.ApprovalID); resumed.Error == nil || resumed.Error.Code != middleware.CodeApprovalRejected || resumed.Attempts != 0 {
			t.Fatalf("the rejected cancellation, resumed: %+v", resumed)
		}
	})
}

// inProcess serves requests with a handler, through no socket.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, req)
	return w.Result(), nil
}

package connectadapter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// actorFromHeader stands in for real authentication: the actor comes from a
// header the test sets, read through Connect's CallInfo.
func actorFromHeader(ctx context.Context) (middleware.Actor, error) {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return middleware.Actor{}, errors.New("no call info")
	}
	return middleware.Actor{ID: info.RequestHeader().Get("X-Test-Actor"), Tenant: "acme"}, nil
}

// A gated method asks for an approval, runs nothing, and runs once when the
// approved call is resumed with Agentsafe-Approval-Id; the approval binds
// the request message.
func TestApprovalRoundTrip(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{opts: []middleware.Option{
			middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithActor(actorFromHeader),
		}})
		c := srv.client(t, p)
		call := func(amount int64, approvalID string) (*connect.Response[testv1.Response], error) {
			req := request(&testv1.Request{Id: "refund-42", Amount: amount})
			req.Header().Set("X-Test-Actor", "agent-7")
			if approvalID != "" {
				req.Header().Set(adapter.HeaderApprovalID, approvalID)
			}
			return c.Gated(t.Context(), req)
		}
		approve := func(id string) {
			t.Helper()
			if _, err := srv.guard.Engine().Decide(t.Context(), id, store.Decision{Approve: true, Approver: middleware.Actor{ID: "manager-bob", Tenant: "acme"}}); err != nil {
				t.Fatal(err)
			}
		}

		_, err := call(120, "")
		ce := wantConnectCode(t, err, connect.CodeFailedPrecondition)
		env, ok := connectadapter.ReadEnvelope(nil, err)
		if !ok || env.Status != middleware.StatusApprovalRequired || !store.ValidApprovalID(env.ApprovalID) || ce.Meta().Get(adapter.HeaderApprovalID) != env.ApprovalID {
			t.Fatalf("envelope %+v, meta %v; want approval_required with the new approval id in detail and header", env, ce.Meta())
		}
		if !strings.Contains(ce.Message(), env.ApprovalID) {
			t.Errorf("message %q does not tell the caller which id to resume with", ce.Message())
		}
		if srv.svc.runs.Load() != 0 {
			t.Fatal("a gated call ran before approval")
		}
		approve(env.ApprovalID)

		res, err := call(120, env.ApprovalID)
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		if got, _ := connectadapter.ReadEnvelope(res, err); got.ApprovalID != env.ApprovalID || srv.svc.runs.Load() != 1 {
			t.Errorf("resumed envelope %+v, runs %d; want approval %s consumed by one run", got, srv.svc.runs.Load(), env.ApprovalID)
		}
		if x := srv.svc.executions()[0]; x.Approval == nil || x.Approval.ID != env.ApprovalID || x.Approval.Approver.ID != "manager-bob" {
			t.Errorf("handler saw approval %+v", x.Approval)
		}

		_, err = call(120, env.ApprovalID)
		wantConnectCode(t, err, connect.CodePermissionDenied)
		if again, _ := connectadapter.ReadEnvelope(nil, err); again.Error.Code != middleware.CodeApprovalConsumed {
			t.Errorf("second resume %+v, want APPROVAL_CONSUMED", again.Error)
		}

		// The approval binds the message: another amount does not match.
		_, err = call(1, "")
		other, _ := connectadapter.ReadEnvelope(nil, err)
		approve(other.ApprovalID)
		_, err = call(2, other.ApprovalID)
		wantConnectCode(t, err, connect.CodePermissionDenied)
		if mismatch, _ := connectadapter.ReadEnvelope(nil, err); mismatch.Error.Code != middleware.CodeApprovalInputMismatch {
			t.Errorf("changed input %+v, want APPROVAL_INPUT_MISMATCH", mismatch.Error)
		}
		if srv.svc.runs.Load() != 1 {
			t.Errorf("handler ran %d times, want 1", srv.svc.runs.Load())
		}
	})
}

package approvalconsole_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// An agent's refund waits for a manager; the manager approves it through
// the console's JSON API; the agent's resume then runs it.
func Example() {
	type callerKey struct{}
	reg := middleware.NewRegistry().Register("/orders.v1.Orders/Refund", middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Approval:   middleware.Approval{Required: true, Type: "manager"},
	})
	eng, err := middleware.New(reg,
		middleware.WithProtoFiles(nil), // the example links no generated code for its procedure
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
			return ctx.Value(callerKey{}).(middleware.Actor), nil
		}),
		middleware.WithApprovalView(func(_ context.Context, _ string, in []byte) (string, error) {
			var v struct{ Order string }
			err := json.Unmarshal(in, &v)
			return "refund order " + v.Order, err
		}),
	)
	if err != nil {
		panic(err)
	}

	// The application's login decides who is an approver; here, a header.
	authorize := func(r *http.Request) (middleware.Actor, error) {
		if r.Header.Get("X-User") != "bob" {
			return middleware.Actor{}, errors.New("not signed in")
		}
		return middleware.Actor{ID: "bob", Tenant: "acme"}, nil
	}
	srv := httptest.NewServer(approvalconsole.New(eng, authorize))
	defer srv.Close()
	get := func(method, path, token, body string, out any) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-User", "bob")
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set(approvalconsole.TokenHeader, token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		_ = json.NewDecoder(res.Body).Decode(out)
		return res.StatusCode
	}

	// The agent asks; nothing runs yet. (An application's calls come
	// through an adapter, connectadapter or nethttpadapter; here the call
	// is handed to the engine as an adapter does.)
	agent := context.WithValue(context.Background(), callerKey{}, middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent"})
	route := adapter.Resolve(eng, "/orders.v1.Orders/Refund")
	call := adapter.Call[string]{Input: adapter.JSONInput([]byte(`{"order":"42"}`))}
	refund := func(context.Context) (string, error) { return "refunded", nil }
	_, env, err := adapter.Execute(agent, route, call, refund)
	fmt.Println(middleware.CodeOf(err))

	// The manager lists what waits, and approves it.
	var list struct{ Approvals []approvalconsole.Approval }
	get("GET", "/api/approvals", "", "", &list)
	a := list.Approvals[0]
	fmt.Println(a.Procedure, "by", a.Requester.ID+":", a.View)

	var session approvalconsole.Session
	get("GET", "/api/session", "", "", &session)
	var decided approvalconsole.Approval
	status := get("POST", "/api/approvals/"+a.ID+"/decision", session.Token, `{"approve":true,"comment":"ok"}`, &decided)
	fmt.Println(status, decided.Status, "by", decided.Approver.ID)

	// Without the token, a decision is refused.
	var refused approvalconsole.ErrorBody
	fmt.Println(get("POST", "/api/approvals/"+a.ID+"/decision", "", `{"approve":false}`, &refused), refused.Error.Code)

	// The agent resumes with the approval id: the refund runs.
	call.ApprovalID = env.ApprovalID
	v, _, err := adapter.Execute(agent, route, call, refund)
	fmt.Println(v, err)
	// Output:
	// APPROVAL_REQUIRED
	// /orders.v1.Orders/Refund by agent-7: refund order 42
	// 200 approved by bob
	// 403 csrf_token
	// refunded <nil>
}

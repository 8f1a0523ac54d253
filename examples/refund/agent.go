package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1/ordersv1connect"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// result is what one agent call came to, as the agent saw it on the wire
// and as the service and the audit trail saw it.
type result struct {
	ExecutionID string
	Code        middleware.Code
	Retryable   bool
	Attempts    int
	ApprovalID  string
	Runs        []orders.Attempt
	Events      []middleware.Event
}

// report is the story's outcome, step by step; the test asserts it.
type report struct {
	Read, Notify, Refund, Timeout, Cancelled       result
	AskApproval, Resume, ResumeAgain, Reinvocation result
	AskCancel, CancelRejected                      result
	GatewayRefunds                                 int
	// MCPTools lists the tools the MCP bridge offers; MCPRead is a tool call.
	MCPTools []string
	MCPRead  result
}

// approver decides approvals: automatically as the manager, or by waiting
// for a person at the console.
type approver func(ctx context.Context, approvalID string) error

// agent is a scripted AI agent calling the order service over real HTTP
// with a Connect client.
type scriptedAgent struct {
	s      *server
	client ordersv1connect.OrderServiceClient
	out    io.Writer
}

func newAgent(s *server, out io.Writer) *scriptedAgent {
	client := ordersv1connect.NewOrderServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(bearer("agent-token")))
	return &scriptedAgent{s: s, client: client, out: out}
}

// run plays the story.
func (a *scriptedAgent) run(ctx context.Context, approve approver) (report, error) {
	var r report
	svc := a.s.svc

	a.title("1. A read that fails once is retried by the runtime, inside the same execution")
	svc.FlakyReads.Store(1)
	r.Read = a.show(unary(ctx, a.client.GetOrder, &ordersv1.GetOrderRequest{OrderId: "42"}, ""))

	a.title("2. An external write that fails is NOT retried: re-invoking is the agent's decision")
	svc.FlakyMails.Store(1)
	r.Notify = a.show(unary(ctx, a.client.NotifyCustomer, &ordersv1.NotifyCustomerRequest{OrderId: "42", Message: "Your refund is on its way."}, ""))

	a.title("3. A refund whose reply is lost is retried under the SAME idempotency key: the gateway pays once")
	svc.Gateway.LoseReplies.Store(1)
	r.Refund = a.show(unary(ctx, a.client.RefundOrder, &ordersv1.RefundOrderRequest{OrderId: "44", AmountCents: 50_00, Reason: "damaged"}, ""))
	r.GatewayRefunds = svc.Gateway.Refunds()
	fmt.Fprintf(a.out, "   the gateway applied %d refund(s) for %d attempts\n", r.GatewayRefunds, r.Refund.Attempts)

	a.title("4a. An attempt that outlives its own timeout: TIMEOUT (the runtime's clock)")
	svc.ReportTime = time.Second
	r.Timeout = a.show(unary(ctx, a.client.ExportReport, &ordersv1.ExportReportRequest{Day: "2026-12-02"}, ""))

	a.title("4b. The agent gives up after 100ms: CANCELLED (the caller's clock), never retried")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _, err := unary(short, a.client.ExportReport, &ordersv1.ExportReportRequest{Day: "2026-12-02"}, "")
	cancel()
	fmt.Fprintf(a.out, "   the agent saw: %v\n", err)
	r.Cancelled = a.show(a.serverSide(ctx, ordersv1connect.OrderServiceExportReportProcedure))

	a.title("5. A large refund needs a manager: the first call runs nothing and returns an approval id")
	big := &ordersv1.RefundOrderRequest{OrderId: "43", AmountCents: 1_500_00, Reason: "customer returned everything"}
	r.AskApproval = a.show(unary(ctx, a.client.RefundOrder, big, ""))
	if r.AskApproval.ApprovalID == "" {
		return r, fmt.Errorf("no approval id in %+v", r.AskApproval)
	}
	if err := approve(ctx, r.AskApproval.ApprovalID); err != nil {
		return r, err
	}
	a.title("   ...the agent resumes the same call with Agentsafe-Approval-Id: it runs once")
	r.Resume = a.show(unary(ctx, a.client.RefundOrder, big, r.AskApproval.ApprovalID))
	a.title("   ...resuming again is refused: an approval is consumed at most once")
	r.ResumeAgain = a.show(unary(ctx, a.client.RefundOrder, big, r.AskApproval.ApprovalID))

	a.title("6. The model calls the refund of step 3 again: a NEW execution, refused by the business rule")
	r.Reinvocation = a.show(unary(ctx, a.client.RefundOrder, &ordersv1.RefundOrderRequest{OrderId: "44", AmountCents: 50_00, Reason: "damaged"}, ""))
	fmt.Fprintf(a.out, "   step 3 ran as %s, this call as %s\n", r.Refund.ExecutionID, r.Reinvocation.ExecutionID)

	a.title("7. Cancelling an order is destructive: always approved first; the manager rejects it")
	r.AskCancel = a.show(unary(ctx, a.client.CancelOrder, &ordersv1.CancelOrderRequest{OrderId: "42"}, ""))
	if _, err := a.s.eng.Decide(ctx, r.AskCancel.ApprovalID, store.Decision{Approve: false, Approver: manager, Comment: "the customer wants to keep it"}); err != nil {
		return r, err
	}
	r.CancelRejected = a.show(unary(ctx, a.client.CancelOrder, &ordersv1.CancelOrderRequest{OrderId: "42"}, r.AskCancel.ApprovalID))

	a.title("8. The same service as MCP tools: listed with hints from the metadata, called through the same guarantees")
	if err := a.mcp(ctx, &r); err != nil {
		return r, err
	}
	return r, nil
}

// mcp lists the bridge's tools and calls one over streamable HTTP, as an
// MCP client would.
func (a *scriptedAgent) mcp(ctx context.Context, r *report) error {
	hc := &http.Client{Transport: bearerTransport("agent-token")}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "scripted-agent", Version: "v1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.s.url + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	for _, t := range tools.Tools {
		r.MCPTools = append(r.MCPTools, t.Name)
		h := t.Annotations
		fmt.Fprintf(a.out, "   tool %-16s readOnly=%t destructive=%t idempotent=%t openWorld=%t\n", t.Name, h.ReadOnlyHint, deref(h.DestructiveHint), h.IdempotentHint, deref(h.OpenWorldHint))
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_order", Arguments: map[string]any{"orderId": "42"}})
	if err != nil {
		return err
	}
	env, _ := mcpadapter.ReadEnvelope(res)
	r.MCPRead = a.show(res.StructuredContent, env, nil)
	return nil
}

func deref(b *bool) bool { return b != nil && *b }

// bearerTransport authenticates an MCP client's requests.
type bearerTransport string

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(req)
}

// unary calls one procedure and reads the envelope back from the wire.
func unary[Req, Res any](ctx context.Context, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, approvalID string) (*Res, middleware.Envelope, error) {
	req := connect.NewRequest(msg)
	if approvalID != "" {
		req.Header().Set(adapter.HeaderApprovalID, approvalID)
	}
	res, err := f(ctx, req)
	env, _ := connectadapter.ReadEnvelope(res, err)
	if err != nil {
		return nil, env, err
	}
	return res.Msg, env, nil
}

func (a *scriptedAgent) title(s string) { fmt.Fprintf(a.out, "\n%s\n", s) }

// show prints a call's outcome, the service's attempts and the audit trail.
func (a *scriptedAgent) show(res any, env middleware.Envelope, err error) result {
	r := result{ExecutionID: env.ExecutionID, Attempts: env.Attempts, ApprovalID: env.ApprovalID}
	if env.Error != nil {
		r.Code, r.Retryable = env.Error.Code, env.Error.Retryable
		fmt.Fprintf(a.out, "   → %s %s: %q (safe to re-invoke: %t), %d attempt(s)\n", env.Status, env.Error.Code, env.Error.Message, env.Error.Retryable, env.Attempts)
	} else {
		fmt.Fprintf(a.out, "   → %s in %d attempt(s): %v\n", env.Status, env.Attempts, res)
	}
	if env.ApprovalID != "" {
		fmt.Fprintf(a.out, "   approval id: %s\n", env.ApprovalID)
	}
	r.Runs = a.s.svc.Attempts.Of(env.ExecutionID)
	for _, run := range r.Runs {
		fmt.Fprintf(a.out, "   handler: %s attempt %d key %s… %s\n", run.ExecutionID, run.Attempt, run.IdempotencyKey[:12], run.What)
	}
	r.Events = a.s.audit.Execution(env.ExecutionID)
	fmt.Fprintf(a.out, "   audit trail of %s:\n", env.ExecutionID)
	print(a.out, r.Events)
	return r
}

// serverSide finds the last execution of procedure and waits for its final
// event: what the server decided after the agent had left.
func (a *scriptedAgent) serverSide(ctx context.Context, procedure string) (any, middleware.Envelope, error) {
	var id string
	for _, run := range a.s.svc.Attempts.All() {
		if run.Procedure == procedure {
			id = run.ExecutionID
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	evs, err := a.s.audit.WaitFinal(ctx, id)
	if err != nil {
		return nil, middleware.Envelope{}, fmt.Errorf("no final event for %s: %w", id, err)
	}
	i := slices.IndexFunc(evs, func(e middleware.Event) bool { return e.Type.Final() })
	e := evs[i]
	env := middleware.Envelope{ExecutionID: id, Status: e.Code.Status(), Attempts: e.Attempts}
	if e.Code != middleware.CodeOK {
		env.Error = &middleware.EnvelopeError{Code: e.Code, Message: "(as the server recorded it)", Retryable: e.Retryable}
	}
	return nil, env, nil
}

// bearer authenticates the agent's calls.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}
func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

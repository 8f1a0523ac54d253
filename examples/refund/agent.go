package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
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
	Replayed    bool
	Runs        []orders.Attempt
	Events      []middleware.Event
}

// report is the story's outcome, step by step; the test asserts it.
type report struct {
	Read, Notify, Refund, Timeout, Cancelled       result
	AskApproval, Resume, ResumeAgain, Reinvocation result
	AskCancel, CancelRejected                      result
	GatewayRefunds                                 int
	// LostReply is the keyed refund whose reply the agent never got, as
	// the server recorded it; Replay the agent's repeat with the same key,
	// ReplayTrail the repeat's own audit trail, and RefundsBeforeKeyed and
	// RefundsAfterKeyed what the gateway had applied around the two calls.
	LostReply, Replay                     result
	ReplayTrail                           []middleware.Event
	RefundsBeforeKeyed, RefundsAfterKeyed int
	// MCPTools lists the tools the MCP bridge offers; MCPRead is a tool call.
	MCPTools []string
	MCPRead  result
	// Denied is a refund over the limit, denied by a policy.
	Denied result
	// Inventory is the engine's inventory; Check and CheckExit what the
	// drift gate said of a change that widens it.
	Inventory []byte
	Check     string
	CheckExit int
	// MCPAsk is a large refund over MCP, which needs approval: its result
	// links to the approval in the console (MCPLink); MCPResume is the
	// approvals_resume call once it is approved.
	MCPAsk    result
	MCPLink   string
	MCPResume result
	// StaleAsk is a refund of order 77 the manager approved as its preview
	// showed it (StaleText); Stale the resume after the order was partly
	// refunded elsewhere; FreshAsk the new request with its new preview
	// (FreshText), Fresh its approved resume and FreshAgain a second one;
	// StaleRefunds the gateway's refunds before and after the stale resume.
	StaleAsk, Stale, FreshAsk, Fresh, FreshAgain result
	StaleText, FreshText                         string
	StaleRefunds                                 [2]int
	// Loop is carol's agent refunding 400.00 EUR orders in a loop until the
	// refunds budget stops it: Escalated is the refund that would pass the
	// budget and waits for a manager, Overdraft its approved resume.
	// Emails are her agent's emails, the last refused by the emails budget
	// with EmailsRetryAfter, the Retry-After the wire carried.
	Loop                 []result
	Escalated            result
	EscalationReason     string
	Overdraft            result
	Emails               []result
	EmailsRetryAfter     time.Duration
	RefundsLeft, Emailed int64
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
	// network loses replies on the way back to the agent.
	network *lossyTransport
}

func newAgent(s *server, out io.Writer) *scriptedAgent {
	network := &lossyTransport{}
	client := ordersv1connect.NewOrderServiceClient(&http.Client{Transport: network}, s.url, connect.WithInterceptors(bearer("agent-token")))
	return &scriptedAgent{s: s, client: client, out: out, network: network}
}

// lossyTransport is the agent's network: it delivers every request, and
// loses the next LoseReplies replies after the server has answered.
type lossyTransport struct{ LoseReplies atomic.Int32 }

func (t *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || t.LoseReplies.Add(-1) < 0 {
		return res, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return nil, errors.New("connection reset by peer: the reply was lost")
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

	a.title("5b. What the approver sees is what runs: the approval is bound to the order as the manager saw it")
	if err := a.stale(ctx, &r, approve); err != nil {
		return r, err
	}

	a.title("6. The model calls the refund of step 3 again: a NEW execution, refused by the business rule")
	r.Reinvocation = a.show(unary(ctx, a.client.RefundOrder, &ordersv1.RefundOrderRequest{OrderId: "44", AmountCents: 50_00, Reason: "damaged"}, ""))
	fmt.Fprintf(a.out, "   step 3 ran as %s, this call as %s\n", r.Refund.ExecutionID, r.Reinvocation.ExecutionID)

	a.title("6b. With an Idempotency-Key the agent may call again: the reply of a refund is lost, the repeat is replayed")
	if err := a.keyedRefund(ctx, &r); err != nil {
		return r, err
	}

	a.title("7. Cancelling an order is destructive: always approved first; the manager rejects it")
	r.AskCancel = a.show(unary(ctx, a.client.CancelOrder, &ordersv1.CancelOrderRequest{OrderId: "42"}, ""))
	if _, err := a.s.eng.Decide(ctx, r.AskCancel.ApprovalID, store.Decision{Approve: false, Approver: manager, Comment: "the customer wants to keep it"}); err != nil {
		return r, err
	}
	r.CancelRejected = a.show(unary(ctx, a.client.CancelOrder, &ordersv1.CancelOrderRequest{OrderId: "42"}, r.AskCancel.ApprovalID))

	a.title("8. The same service as MCP tools: listed with hints from the metadata, called through the same guarantees")
	if err := a.mcp(ctx, &r, approve); err != nil {
		return r, err
	}

	a.title("9. A refund over the limit: the refund-limit policy denies it; nothing runs, no approval is asked for")
	r.Denied = a.show(unary(ctx, a.client.RefundOrder, &ordersv1.RefundOrderRequest{OrderId: "43", AmountCents: 6_000_00, Reason: "a very large refund"}, ""))

	a.title("10. What agents can reach, as a CI drift gate sees it")
	if err := a.inventory(ctx, &r); err != nil {
		return r, err
	}

	if err := a.budgets(ctx, &r, approve); err != nil {
		return r, err
	}
	return r, nil
}

// budgets plays an agent working for carol that loops: refunds of 400.00
// EUR, none over the approval threshold, until the refunds budget (2,500.00
// EUR a day per person) would pass its limit and the next refund waits for
// a manager; then emails, until the emails budget (3 an hour per person)
// refuses with Retry-After.
func (a *scriptedAgent) budgets(ctx context.Context, r *report, approve approver) error {
	carol := ordersv1connect.NewOrderServiceClient(http.DefaultClient, a.s.url, connect.WithInterceptors(bearer("carol-agent-token")))
	a.title("11. An agent loops small refunds for carol: none over the approval threshold, together past the refunds budget")
	for _, order := range []string{"51", "52", "53", "54", "55", "56", "57"} {
		req := &ordersv1.RefundOrderRequest{OrderId: order, AmountCents: 400_00, Reason: "goodwill"}
		res := a.show(unary(ctx, carol.RefundOrder, req, ""))
		if res.Code == middleware.CodeOK {
			r.Loop = append(r.Loop, res)
			continue
		}
		r.Escalated = res
		if res.ApprovalID == "" {
			return fmt.Errorf("the loop's refund of order %s ended %s, not in an approval", order, res.Code)
		}
		rec, err := a.s.eng.Get(ctx, res.ApprovalID)
		if err != nil {
			return err
		}
		r.EscalationReason = strings.Join(rec.Reasons, "; ")
		fmt.Fprintf(a.out, "   the budget stopped the loop: the refund waits for a manager, who sees: %s\n", r.EscalationReason)
		if err := approve(ctx, res.ApprovalID); err != nil {
			return err
		}
		a.title("   ...approved, the refund runs past the limit: an overdraft, recorded as one")
		r.Overdraft = a.show(unary(ctx, carol.RefundOrder, req, res.ApprovalID))
		break
	}
	left, err := a.s.eng.Budget(ctx, "refunds", carolsAgent)
	if err != nil {
		return err
	}
	r.RefundsLeft = left
	fmt.Fprintf(a.out, "   Engine.Budget: %s left of carol's refunds today\n", orders.Money(left))

	a.title("12. Her agent emails each customer: the emails budget refuses the 4th, with when to try again")
	for _, order := range []string{"51", "52", "53", "54"} {
		res, env, err := unary(ctx, carol.NotifyCustomer, &ordersv1.NotifyCustomerRequest{OrderId: order, Message: "A goodwill refund is on its way."}, "")
		r.Emails = append(r.Emails, a.show(res, env, err))
		if env.Error != nil && env.Error.Code == middleware.CodeBudgetExceeded {
			r.EmailsRetryAfter = env.RetryAfter
			fmt.Fprintf(a.out, "   Retry-After: %.0f seconds\n", env.RetryAfter.Seconds())
		}
	}
	left, err = a.s.eng.Budget(ctx, "emails", carolsAgent)
	r.Emailed = 3 - left
	return err
}

// stale asks for a refund of order 77, which the manager approves as its
// preview shows it; the order is partly refunded elsewhere before the
// agent resumes, so the resume is refused APPROVAL_STALE and nothing runs;
// the agent asks again, the manager sees the refund as the order is now,
// approves, and it runs once.
func (a *scriptedAgent) stale(ctx context.Context, r *report, approve approver) error {
	refund := &ordersv1.RefundOrderRequest{OrderId: "77", AmountCents: 420_00, Reason: "wrong colour"}
	ask := func(what string) (result, string, error) {
		res := a.show(unary(ctx, a.client.RefundOrder, refund, ""))
		rec, err := a.s.eng.Get(ctx, res.ApprovalID)
		if err != nil {
			return res, "", fmt.Errorf("%s: %w", what, err)
		}
		return res, rec.PreviewText, approve(ctx, res.ApprovalID)
	}
	var err error
	if r.StaleAsk, r.StaleText, err = ask("the first request"); err != nil {
		return err
	}
	a.title("   ...before the agent resumes, the support desk refunds 80.00 EUR of order 77 by hand")
	a.s.svc.RefundElsewhere("77", 80_00)
	r.StaleRefunds[0] = a.s.svc.Gateway.Refunds()
	r.Stale = a.show(unary(ctx, a.client.RefundOrder, refund, r.StaleAsk.ApprovalID))
	r.StaleRefunds[1] = a.s.svc.Gateway.Refunds()
	fmt.Fprintf(a.out, "   the gateway applied %d refund(s) for the stale resume; the approval stays approved, bound to the order as it was\n", r.StaleRefunds[1]-r.StaleRefunds[0])
	a.title("   ...the agent asks again: a new request, showing the order as it is now; approved, it runs once")
	if r.FreshAsk, r.FreshText, err = ask("the fresh request"); err != nil {
		return err
	}
	r.Fresh = a.show(unary(ctx, a.client.RefundOrder, refund, r.FreshAsk.ApprovalID))
	r.FreshAgain = a.show(unary(ctx, a.client.RefundOrder, refund, r.FreshAsk.ApprovalID))
	return nil
}

// keyedRefund refunds order 42 under the agent's own Idempotency-Key; the
// reply is lost on the way back, so the agent, which cannot tell whether
// the refund happened, calls again with the same key: the stored result is
// replayed (the first execution's id and response), nothing runs, and the
// gateway has paid once.
func (a *scriptedAgent) keyedRefund(ctx context.Context, r *report) error {
	const key = "refund-42-late-delivery" // the agent's key for this one operation
	refund := &ordersv1.RefundOrderRequest{OrderId: "42", AmountCents: 30_00, Reason: "late delivery"}
	r.RefundsBeforeKeyed = a.s.svc.Gateway.Refunds()
	a.network.LoseReplies.Store(1)
	_, _, err := unary(ctx, a.client.RefundOrder, refund, "", key)
	fmt.Fprintf(a.out, "   the agent sent Idempotency-Key: %s and saw: %v\n", key, err)
	r.LostReply = a.show(a.serverSide(ctx, ordersv1connect.OrderServiceRefundOrderProcedure))

	a.title("   ...the agent calls again with the same Idempotency-Key: replayed, nothing runs")
	res, env, err := unary(ctx, a.client.RefundOrder, refund, "", key)
	r.Replay = a.show(res, env, err)
	r.RefundsAfterKeyed = a.s.svc.Gateway.Refunds()
	fmt.Fprintf(a.out, "   Agentsafe-Replayed: %t, execution %s (the first call's); the gateway applied %d refund(s) for the two calls\n",
		env.Replayed, env.ExecutionID, r.RefundsAfterKeyed-r.RefundsBeforeKeyed)
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id, err := a.s.replays.wait(wait, env.ExecutionID)
	if err != nil {
		return err
	}
	if r.ReplayTrail, err = a.s.audit.WaitFinal(wait, id); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "   audit trail of the repeat, %s:\n", id)
	print(a.out, r.ReplayTrail)
	return nil
}

// mcp lists the bridge's tools and calls one over streamable HTTP, as an
// MCP client would.
func (a *scriptedAgent) mcp(ctx context.Context, r *report, approve approver) error {
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

	a.title("   ...a large refund over MCP needs a manager: the result links to the approval in the console")
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"orderId": "45", "amountCents": 2_000_00, "reason": "wrong size"}})
	if err != nil {
		return err
	}
	env, _ = mcpadapter.ReadEnvelope(res)
	r.MCPAsk, r.MCPLink = a.show(nil, env, nil), env.ApprovalURL
	fmt.Fprintf(a.out, "   approval %s: a person decides at %s (expires %s)\n", env.ApprovalID, env.ApprovalURL, env.ExpiresAt.Format(time.RFC3339))
	if err := approve(ctx, env.ApprovalID); err != nil {
		return err
	}
	a.title("   ...once approved, approvals_resume runs it by id alone (the bridge kept the arguments, sealed): once")
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "approvals_resume", Arguments: map[string]any{"approval_id": env.ApprovalID}})
	if err != nil {
		return err
	}
	env, _ = mcpadapter.ReadEnvelope(res)
	r.MCPResume = a.show(res.StructuredContent, env, nil)
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

// unary calls one procedure, with an approval id and the agent's own
// idempotency key when given, and reads the envelope back from the wire.
func unary[Req, Res any](ctx context.Context, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, approvalID string, key ...string) (*Res, middleware.Envelope, error) {
	req := connect.NewRequest(msg)
	if approvalID != "" {
		req.Header().Set(adapter.HeaderApprovalID, approvalID)
	}
	for _, k := range key {
		req.Header().Set(adapter.HeaderIdempotencyKey, k)
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
	r := result{ExecutionID: env.ExecutionID, Attempts: env.Attempts, ApprovalID: env.ApprovalID, Replayed: env.Replayed}
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
	// Sinks are delivered asynchronously: wait for the execution's final
	// event, which every execution has, so its trail is whole.
	if env.ExecutionID != "" {
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r.Events, _ = a.s.audit.WaitFinal(wait, env.ExecutionID)
		cancel()
	}
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

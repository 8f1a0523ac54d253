package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/agentsafetest"
	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1/ordersv1connect"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/jackc/pgx/v5"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// TestStory runs the scripted agent against the example server and checks
// the story's outcomes (not its log text), on every kind of store; with
// -postgres the audit trail is in PostgreSQL too.
func TestStory(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) stores{
		"memory": func(*testing.T) stores { return inMemory() },
		"redis": func(t *testing.T) stores {
			rdb := redistest.Start(t).Client()
			approvals, err := approvalstore.NewRedis(rdb)
			if err != nil {
				t.Fatal(err)
			}
			results, err := resultstore.NewRedis(rdb)
			if err != nil {
				t.Fatal(err)
			}
			budgets, err := budgetstore.NewRedis(rdb)
			if err != nil {
				t.Fatal(err)
			}
			return stores{approvals: approvals, results: results, budgets: budgets}
		},
		"postgres": func(t *testing.T) stores {
			srv := pgtest.Start(t)
			st, err := openStores(storeConfig{postgres: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				st.close() // writes the audit sink's last batch
				checkPostgresTrail(t, srv.URL())
			})
			return st
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			s, err := newServer(st, st.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer s.close()
			r, err := newAgent(s, io.Discard).run(t.Context(), autoApprove(s))
			if err != nil {
				t.Fatal(err)
			}
			checkStory(t, r)
		})
	}
}

func checkStory(t *testing.T, r report) {
	t.Helper()
	// 1. The flaky read is retried inside one execution, under one key.
	if r.Read.Code != middleware.CodeOK || r.Read.Attempts != 2 || len(r.Read.Runs) != 2 ||
		r.Read.Runs[0].ExecutionID != r.Read.Runs[1].ExecutionID || r.Read.Runs[0].IdempotencyKey != r.Read.Runs[1].IdempotencyKey {
		t.Errorf("read: %+v", r.Read)
	}
	// 2. The external write is not retried, and not safe to re-invoke.
	if r.Notify.Code != middleware.CodeExecutionFailed || r.Notify.Attempts != 1 || len(r.Notify.Runs) != 1 || r.Notify.Retryable {
		t.Errorf("notify: %+v", r.Notify)
	}
	// 3. The idempotent refund is retried under the same key; the gateway pays once.
	if r.Refund.Code != middleware.CodeOK || r.Refund.Attempts != 2 || r.GatewayRefunds != 1 ||
		r.Refund.Runs[0].IdempotencyKey != r.Refund.Runs[1].IdempotencyKey {
		t.Errorf("refund: %+v, gateway refunds %d", r.Refund, r.GatewayRefunds)
	}
	// 4. Timeout and cancellation are told apart; neither is retried.
	if r.Timeout.Code != middleware.CodeTimeout || r.Timeout.Attempts != 1 {
		t.Errorf("timeout: %+v", r.Timeout)
	}
	if r.Cancelled.Code != middleware.CodeCancelled || r.Cancelled.Attempts != 1 || r.Cancelled.ExecutionID == r.Timeout.ExecutionID {
		t.Errorf("cancelled: %+v", r.Cancelled)
	}
	// 5. The approval: requested (nothing ran), approved, consumed once.
	if r.AskApproval.Code != middleware.CodeApprovalRequired || len(r.AskApproval.Runs) != 0 || !store.ValidApprovalID(r.AskApproval.ApprovalID) {
		t.Errorf("ask approval: %+v", r.AskApproval)
	}
	if r.Resume.Code != middleware.CodeOK || len(r.Resume.Runs) != 1 || r.Resume.ApprovalID != r.AskApproval.ApprovalID {
		t.Errorf("resume: %+v", r.Resume)
	}
	if r.ResumeAgain.Code != middleware.CodeApprovalConsumed || len(r.ResumeAgain.Runs) != 0 {
		t.Errorf("second resume: %+v", r.ResumeAgain)
	}
	if !hasEvent(r.Resume.Events, middleware.EventApprovalConsumed) || !hasEvent(r.AskApproval.Events, middleware.EventApprovalRequested) {
		t.Error("the approval steps are missing from the audit trail")
	}
	// 5b. The manager approved the refund of order 77 as it was; once it
	// was partly refunded elsewhere, the resume is refused stale and
	// nothing runs; the fresh request shows the order as it is, and runs
	// once.
	if r.StaleText != "refund 420.00 EUR of order 77 to card ****1234 (paid 500.00 EUR)" || r.StaleAsk.Code != middleware.CodeApprovalRequired {
		t.Errorf("the first request of order 77: %+v, preview %q", r.StaleAsk, r.StaleText)
	}
	if r.Stale.Code != middleware.CodeApprovalStale || len(r.Stale.Runs) != 0 || r.StaleRefunds[0] != r.StaleRefunds[1] ||
		!hasEvent(r.Stale.Events, middleware.EventApprovalStale) || hasEvent(r.Stale.Events, middleware.EventApprovalConsumed) {
		t.Errorf("the stale resume: %+v, gateway refunds %v", r.Stale, r.StaleRefunds)
	}
	if r.FreshAsk.ApprovalID == r.StaleAsk.ApprovalID || r.FreshText != "refund 420.00 EUR of order 77 to card ****1234 (paid 500.00 EUR, 80.00 EUR refunded already)" {
		t.Errorf("the fresh request: %+v, preview %q", r.FreshAsk, r.FreshText)
	}
	if r.Fresh.Code != middleware.CodeOK || len(r.Fresh.Runs) != 1 || r.FreshAgain.Code != middleware.CodeApprovalConsumed || len(r.FreshAgain.Runs) != 0 {
		t.Errorf("the fresh approval runs once: %+v, then %+v", r.Fresh, r.FreshAgain)
	}
	// 6. A re-invocation is a new execution, refused by the business rule.
	if r.Reinvocation.Code != middleware.CodeExecutionFailed || r.Reinvocation.ExecutionID == r.Refund.ExecutionID || r.GatewayRefunds != 1 {
		t.Errorf("re-invocation: %+v", r.Reinvocation)
	}
	// 6b. A keyed refund whose reply was lost ran once; the repeat with the
	// same key is replayed: the first execution's id and response, nothing
	// run, the gateway paid once, and the audit shows capability.replayed.
	if r.LostReply.Code != middleware.CodeOK || len(r.LostReply.Runs) != 1 || r.RefundsAfterKeyed-r.RefundsBeforeKeyed != 1 {
		t.Errorf("lost reply: %+v, gateway refunds %d → %d", r.LostReply, r.RefundsBeforeKeyed, r.RefundsAfterKeyed)
	}
	if r.Replay.Code != middleware.CodeOK || !r.Replay.Replayed || r.Replay.ExecutionID != r.LostReply.ExecutionID || len(r.Replay.Runs) != 1 {
		t.Errorf("repeat with the same key: %+v, want a replay of %s", r.Replay, r.LostReply.ExecutionID)
	}
	if i := slices.IndexFunc(r.ReplayTrail, func(e middleware.Event) bool { return e.Type == middleware.EventReplayed }); i < 0 ||
		r.ReplayTrail[i].ReplayOf != r.LostReply.ExecutionID || r.ReplayTrail[i].ExecutionID == r.LostReply.ExecutionID {
		t.Errorf("the repeat's audit trail must end in capability.replayed of %s: %+v", r.LostReply.ExecutionID, r.ReplayTrail)
	}
	// 7. The destructive cancel was rejected and never ran.
	if r.AskCancel.Code != middleware.CodeApprovalRequired || r.CancelRejected.Code != middleware.CodeApprovalRejected || len(r.CancelRejected.Runs) != 0 {
		t.Errorf("cancel: %+v / %+v", r.AskCancel, r.CancelRejected)
	}
	// 8. MCP: every procedure exposed on MCP is a tool (not CancelOrder),
	// and approvals_resume; a tool call is governed.
	if !slices.Equal(r.MCPTools, []string{"approvals_resume", "export_report", "get_order", "notify_customer", "refund_order"}) || r.MCPRead.Code != middleware.CodeOK || r.MCPRead.Attempts != 1 || len(r.MCPRead.Runs) != 1 {
		t.Errorf("mcp: tools %v, read %+v", r.MCPTools, r.MCPRead)
	}
	// ...a large refund over MCP links to its approval in the console, and
	// approvals_resume runs it once.
	if r.MCPAsk.Code != middleware.CodeApprovalRequired || !strings.HasSuffix(r.MCPLink, "/console/approvals/"+r.MCPAsk.ApprovalID) || len(r.MCPAsk.Runs) != 0 {
		t.Errorf("mcp approval: %+v, link %q", r.MCPAsk, r.MCPLink)
	}
	if r.MCPResume.Code != middleware.CodeOK || len(r.MCPResume.Runs) != 1 || r.MCPResume.ApprovalID != r.MCPAsk.ApprovalID {
		t.Errorf("mcp approvals_resume: %+v", r.MCPResume)
	}
	// 9. The refund over the limit is denied by the policy; nothing ran.
	if r.Denied.Code != middleware.CodePolicyDenied || len(r.Denied.Runs) != 0 || r.Denied.ApprovalID != "" {
		t.Errorf("denied: %+v", r.Denied)
	}
	// 10. The inventory is the committed one; exposing CancelOrder on MCP
	// is a widening the gate fails.
	if committed, err := os.ReadFile(inventoryFile); err != nil || !bytes.Equal(r.Inventory, committed) {
		t.Errorf("the printed inventory is not %s (%v)", inventoryFile, err)
	}
	if r.CheckExit != 1 || !strings.Contains(r.Check, "widening  /orders.v1.OrderService/CancelOrder  exposed on mcp") || !strings.Contains(r.Check, "1 widening, 0 narrowing, 0 neutral") {
		t.Errorf("check exited %d:\n%s", r.CheckExit, r.Check)
	}
	// 11. Carol's loop: six refunds of 400.00 fit her 2,500.00 a day; the
	// seventh would pass it and waits for a manager, the reason naming the
	// budget; approved, it runs as an overdraft, on the started event too.
	if len(r.Loop) != 6 || r.Escalated.Code != middleware.CodeApprovalRequired || len(r.Escalated.Runs) != 0 ||
		!hasEvent(r.Escalated.Events, middleware.EventBudgetExceeded) {
		t.Errorf("the loop: %d refunds, then %+v", len(r.Loop), r.Escalated)
	}
	for _, want := range []string{`budget "refunds"`, "spends 40000", "240000 of its limit of 250000"} {
		if !strings.Contains(r.EscalationReason, want) {
			t.Errorf("the escalated approval's reason %q lacks %q", r.EscalationReason, want)
		}
	}
	if r.Overdraft.Code != middleware.CodeOK || len(r.Overdraft.Runs) != 1 || r.RefundsLeft != -300_00 {
		t.Errorf("the approved overdraft: %+v, %d left", r.Overdraft, r.RefundsLeft)
	}
	if i := slices.IndexFunc(r.Overdraft.Events, func(e middleware.Event) bool { return e.Type == middleware.EventStarted }); i < 0 ||
		r.Overdraft.Events[i].Budget != "refunds" || r.Overdraft.Events[i].Spent != 2_800_00 || r.Overdraft.Events[i].Limit != 2_500_00 {
		t.Errorf("the overdraft's started event must show 2800.00 spent of 2500.00: %+v", r.Overdraft.Events)
	}
	// 12. Her emails: three sent, the fourth refused with Retry-After.
	if len(r.Emails) != 4 || r.Emails[3].Code != middleware.CodeBudgetExceeded || len(r.Emails[3].Runs) != 0 ||
		r.EmailsRetryAfter <= 59*time.Minute || r.EmailsRetryAfter > time.Hour || r.Emailed != 3 {
		t.Errorf("emails: %+v, Retry-After %s, %d emailed", r.Emails, r.EmailsRetryAfter, r.Emailed)
	}
	for _, e := range r.Emails[:3] {
		if e.Code != middleware.CodeOK {
			t.Errorf("an email within the budget: %+v", e)
		}
	}
	if !hasEvent(r.Emails[3].Events, middleware.EventBudgetExceeded) {
		t.Errorf("the refused email's trail lacks capability.budget_exceeded: %+v", r.Emails[3].Events)
	}
}

// checkPostgresTrail checks that the strict audit sink kept the story's
// trail (every execution starts with capability.requested, each of the
// four approvals that ran, the Connect refunds', the MCP refund's and
// carol's overdraft's, was consumed once, and the budgets the story
// exceeds are there) and that the keyed refund's result and the budgets
// are stored in PostgreSQL.
func checkPostgresTrail(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var executions, requested, consumed, exceeded int
	err = conn.QueryRow(ctx, `SELECT count(DISTINCT execution_id), count(*) FILTER (WHERE type = 'capability.requested'),
		count(*) FILTER (WHERE type = 'capability.approval_consumed'), count(*) FILTER (WHERE type = 'capability.budget_exceeded')
		FROM agentsafe.audit_events`).Scan(&executions, &requested, &consumed, &exceeded)
	if err != nil {
		t.Fatal(err)
	}
	if executions == 0 || requested != executions || consumed != 4 || exceeded < 3 {
		t.Errorf("the audit trail in PostgreSQL: %d executions, %d requested events, %d consumptions, %d budgets exceeded; want one requested per execution, four consumptions, and the budgets the story exceeds", executions, requested, consumed, exceeded)
	}
	var reservations int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM agentsafe.budget_reservations`).Scan(&reservations); err != nil {
		t.Fatal(err)
	}
	if reservations == 0 {
		t.Error("the budgets must be kept in PostgreSQL")
	}
	var done int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM agentsafe.results WHERE state = 'done'`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done == 0 {
		t.Error("the keyed refund's result must be stored in PostgreSQL, for its repeat to replay")
	}
}

func hasEvent(evs []middleware.Event, t middleware.EventType) bool {
	for _, e := range evs {
		if e.Type == t {
			return true
		}
	}
	return false
}

var update = flag.Bool("update", false, "rewrite the committed inventory")

// TestTheInventoryIsCommitted: agentsafe.json is the engine's inventory
// as it is now (go test -update rewrites it); the drift gate compares
// changes against it.
func TestTheInventoryIsCommitted(t *testing.T) {
	s, err := newServer(inMemory())
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := s.eng.WriteSnapshot(&got); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(inventoryFile, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(inventoryFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the engine's inventory differs from %s (go test -update rewrites it):\n%s", inventoryFile, got.Bytes())
	}
}

// TestALargeRefundWaitsForTheManager runs the service in process on the
// test kit's engine, in a synctest bubble: the approval is found and
// decided with the kit's probe, and expires on the fake clock.
func TestALargeRefundWaitsForTheManager(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := agentsafetest.NewEngine(t, nil, governance()...)
		svc := orders.New()
		mux := http.NewServeMux()
		mux.Handle(routes(eng.Engine, svc))
		client := ordersv1connect.NewOrderServiceClient(&http.Client{Transport: inProcess{mux}}, "http://orders.test",
			connect.WithInterceptors(bearer("agent-token")))
		big := &ordersv1.RefundOrderRequest{OrderId: "43", AmountCents: 1_500_00, Reason: "returned"}

		_, env, err := unary(t.Context(), client.RefundOrder, big, "")
		if env.Error == nil || env.Error.Code != middleware.CodeApprovalRequired {
			t.Fatalf("a large refund: %+v (%v)", env, err)
		}
		approval, err := eng.PendingApproval(t.Context(), env.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if approval.Record.View != "refund 1500.00 EUR on order 43" {
			t.Errorf("the manager sees %q", approval.Record.View)
		}
		if _, err := approval.Approve(t.Context(), manager); err != nil {
			t.Fatal(err)
		}
		if _, resumed, err := unary(t.Context(), client.RefundOrder, big, env.ApprovalID); err != nil || svc.Gateway.Refunds() != 1 {
			t.Fatalf("the resumed refund: %+v (%v), %d gateway refunds", resumed, err, svc.Gateway.Refunds())
		}

		// A second large refund nobody decides: it expires, on the fake clock.
		again := &ordersv1.RefundOrderRequest{OrderId: "42", AmountCents: 1_200_00, Reason: "returned"}
		_, env, _ = unary(t.Context(), client.RefundOrder, again, "")
		time.Sleep(16 * time.Minute)
		if _, expired, _ := unary(t.Context(), client.RefundOrder, again, env.ApprovalID); expired.Error == nil || expired.Error.Code != middleware.CodeApprovalExpired {
			t.Fatalf("resuming after 16 minutes: %+v", expired)
		}
	})
}

// inProcess serves requests with a handler, through no socket: a
// synctest bubble can run it.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, req)
	return w.Result(), nil
}

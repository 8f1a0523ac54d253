package mcpadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// transports runs f over both transports the bridge is served on.
func transports(t *testing.T, f func(t *testing.T, connect func(*mcpadapter.Bridge, *mcp.ClientOptions) *mcp.ClientSession)) {
	t.Run("in-memory", func(t *testing.T) {
		t.Parallel()
		f(t, func(b *mcpadapter.Bridge, o *mcp.ClientOptions) *mcp.ClientSession { return connectInMemory(t, b, o) })
	})
	t.Run("streamable-http", func(t *testing.T) {
		t.Parallel()
		f(t, func(b *mcpadapter.Bridge, o *mcp.ClientOptions) *mcp.ClientSession {
			return connectHTTP(t, b, agent.ID, o)
		})
	})
}

// TestEnvelopeToResult checks the result of each envelope status, over
// both transports: completed is structured content; failed, cancelled
// (an attempt's own TIMEOUT) and approval_required are isError with the
// envelope's code, message and retryable-for-caller.
func TestEnvelopeToResult(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcpadapter.Bridge, *mcp.ClientOptions) *mcp.ClientSession) {
		f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID), mcpadapter.WithResponseHeaders("X-Served-By")}})
		cs := connect(f.bridge, nil)

		t.Run("completed", func(t *testing.T) {
			r := callTool(t, cs, "read", map[string]any{"id": "r1"})
			if r.IsError {
				t.Fatalf("isError: %v", text(r))
			}
			out := structured(t, r)
			env, ok := mcpadapter.ReadEnvelope(r)
			if !ok || env.Status != middleware.StatusCompleted || env.Error != nil {
				t.Fatalf("envelope %+v (found %t), want completed", env, ok)
			}
			if out["id"] != "r1" || out["executionId"] != env.ExecutionID || out["note"] != agent.ID {
				t.Errorf("structured content %v: want the response of execution %s run for %s", out, env.ExecutionID, agent.ID)
			}
			if out["attempt"] != float64(1) {
				t.Errorf("attempt = %v, want 1", out["attempt"])
			}
			if len(text(r)) != 1 || !strings.Contains(text(r)[0], `"executionId":"`+env.ExecutionID+`"`) {
				t.Errorf("text content %v: want the response as JSON too", text(r))
			}
			h := mcpadapter.ReadHeader(r)
			if h.Get(adapter.HeaderExecutionID) != env.ExecutionID || h.Get(adapter.HeaderAttempts) != "1" || h.Get("X-Served-By") != "test-service" {
				t.Errorf("exposed headers %v", h)
			}
		})

		t.Run("failed", func(t *testing.T) {
			r := callTool(t, cs, "write", map[string]any{"id": "w1", "mode": "fail"})
			env := envelopeText(t, r)
			if !r.IsError || env.Status != middleware.StatusFailed || env.Error.Code != middleware.CodeExecutionFailed ||
				env.Error.Message != adapter.ConcealedMessage || env.Error.Retryable {
				t.Fatalf("isError %t, envelope %+v %+v: want a concealed, non-retryable EXECUTION_FAILED", r.IsError, env, env.Error)
			}
			for _, s := range append(text(r), mustJSON(t, r.Meta)) {
				if strings.Contains(s, secret) {
					t.Errorf("the handler's secret reached the tool result: %s", s)
				}
			}
			if meta, ok := mcpadapter.ReadEnvelope(r); !ok || meta.ExecutionID != env.ExecutionID {
				t.Errorf("_meta envelope %+v, text envelope %+v", meta, env)
			}
			if r.StructuredContent != nil {
				t.Errorf("a failure has structured content %v", r.StructuredContent)
			}
		})

		t.Run("failed with the handler's own Connect error", func(t *testing.T) {
			r := callTool(t, cs, "write", map[string]any{"id": "w2", "mode": "declared"})
			const want = `{"code":"failed_precondition","message":"ALREADY_DONE: the record was written before"}`
			if texts := text(r); !r.IsError || len(texts) != 1 || texts[0] != want {
				t.Fatalf("isError %t, text %q: want the handler's error as Connect writes it, %s", r.IsError, texts, want)
			}
			env, ok := mcpadapter.ReadEnvelope(r)
			if !ok || env.Error == nil || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Error.Message != "ALREADY_DONE: the record was written before" {
				t.Fatalf("_meta envelope %+v (found %t): want a non-retryable EXECUTION_FAILED with the handler's message", env, ok)
			}
			if h := mcpadapter.ReadHeader(r); h.Get(adapter.HeaderCode) != "EXECUTION_FAILED" || h.Get(adapter.HeaderRetryable) != "false" {
				t.Errorf("exposed headers %v: want the envelope's code and retryable flag", h)
			}
		})

		t.Run("cancelled by the attempt's timeout", func(t *testing.T) {
			r := callTool(t, cs, "slow", map[string]any{"id": "s1", "mode": "block"})
			env := envelopeText(t, r)
			if !r.IsError || env.Status != middleware.StatusCancelled || env.Error.Code != middleware.CodeTimeout || !env.Error.Retryable {
				t.Fatalf("envelope %+v %+v: want cancelled TIMEOUT, retryable for a read", env, env.Error)
			}
		})

		t.Run("approval required", func(t *testing.T) {
			r := callTool(t, cs, "gated", map[string]any{"id": "g1"})
			env := envelopeText(t, r)
			if !r.IsError || env.Status != middleware.StatusApprovalRequired || env.Error.Code != middleware.CodeApprovalRequired || !store.ValidApprovalID(env.ApprovalID) {
				t.Fatalf("envelope %+v: want approval_required with an approval id", env)
			}
			texts := text(r)
			if len(texts) != 2 || !strings.Contains(texts[1], env.ApprovalID) || !strings.Contains(texts[1], `"_approval_id"`) || !strings.Contains(texts[1], "gated") {
				t.Errorf("the result must say what to do next, naming the approval id, the tool and the argument: %q", texts)
			}
			if len(f.svc.executions()) != 0 {
				for _, x := range f.svc.executions() {
					if x.Procedure == testv1connect.TestServiceGatedProcedure {
						t.Errorf("the gated handler ran before approval")
					}
				}
			}
		})
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestApprovalResume requests an approval through a tool, approves it
// through the store, resumes through MCP with "_approval_id" and checks
// that the call ran once and that a second resume is refused.
func TestApprovalResume(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcpadapter.Bridge, *mcp.ClientOptions) *mcp.ClientSession) {
		// A second gated procedure, to carry the approval id to.
		reg := middleware.NewRegistry().Register(testv1connect.TestServiceIdempotentWriteProcedure, middleware.Capability{
			SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true, Type: "manager"}, Exposure: everySurface})
		f := newFixture(t, fixtureConfig{reg: reg, bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
		cs := connect(f.bridge, nil)
		args := map[string]any{"id": "refund-1", "amount": 12000}
		r := callTool(t, cs, "gated", args)
		id := envelopeText(t, r).ApprovalID
		if !store.ValidApprovalID(id) {
			t.Fatalf("no approval id in %v", text(r))
		}

		resume := func(extra map[string]any) *mcp.CallToolResult {
			a := map[string]any{"_approval_id": id}
			for k, v := range args {
				a[k] = v
			}
			for k, v := range extra {
				a[k] = v
			}
			return callTool(t, cs, "gated", a)
		}
		if env := envelopeText(t, resume(nil)); env.Error == nil || env.Error.Code != middleware.CodeApprovalPending {
			t.Fatalf("resume before the decision: %+v, want APPROVAL_PENDING", env)
		}
		if _, err := f.eng.Decide(context.Background(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
			t.Fatal(err)
		}
		// The approval binds the input: other arguments are refused, and
		// a refusal does not burn the approval.
		if env := envelopeText(t, resume(map[string]any{"amount": 99999})); env.Error == nil || env.Error.Code != middleware.CodeApprovalInputMismatch {
			t.Fatalf("resume with another amount: %+v, want APPROVAL_INPUT_MISMATCH", env)
		}
		// ... and the procedure: the id cannot be carried to another tool.
		if env := envelopeText(t, callTool(t, cs, "idempotent_write", map[string]any{"id": "refund-1", "amount": 12000, "_approval_id": id})); env.Error == nil || env.Error.Code != middleware.CodeApprovalResumeMismatch {
			t.Fatalf("an approval id sent to another tool: %+v, want APPROVAL_RESUME_MISMATCH", env)
		}

		r = resume(nil)
		if r.IsError {
			t.Fatalf("resume after approval: %v", text(r))
		}
		env, _ := mcpadapter.ReadEnvelope(r)
		if env.ApprovalID != id {
			t.Errorf("the resumed execution reports approval %q, want %q", env.ApprovalID, id)
		}
		var gated []middleware.Execution
		for _, x := range f.svc.executions() {
			if x.Procedure == testv1connect.TestServiceGatedProcedure {
				gated = append(gated, x)
			}
		}
		if len(gated) != 1 || gated[0].Approval == nil || gated[0].Approval.Approver.ID != manager.ID || gated[0].Actor.ID != agent.ID {
			t.Fatalf("gated handler runs %+v: want exactly one, for %s, approved by %s", gated, agent.ID, manager.ID)
		}

		r = resume(nil)
		second := envelopeText(t, r)
		if !r.IsError || second.Error.Code != middleware.CodeApprovalConsumed {
			t.Fatalf("second resume: %+v, want APPROVAL_CONSUMED", second)
		}
		if texts := text(r); len(texts) != 2 || !strings.Contains(texts[1], "already used") {
			t.Errorf("a consumed approval must say it already ran: %q", texts)
		}
		if n := len(f.svc.executions()); n != 1 {
			t.Errorf("the service ran %d times, want once", n)
		}
	})
}

// TestInvalidArguments: arguments protojson cannot decode are refused
// before anything runs, naming the argument.
func TestInvalidArguments(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	cs := connectInMemory(t, f.bridge, nil)
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"unknown field", map[string]any{"id": "x", "amout": 5}, []string{`"amout"`, "unknown field"}},
		{"wrong type", map[string]any{"amount": "lots"}, []string{`"amount"`, "int64"}},
		{"fraction for an integer", map[string]any{"failTimes": 1.5}, []string{`"failTimes"`}},
		{"malformed duration", map[string]any{"sleep": "three seconds"}, []string{`"sleep"`, "Duration"}},
		{"approval id not a string", map[string]any{"_approval_id": 7}, []string{`"_approval_id"`, "string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := callTool(t, cs, "write", tc.args)
			env := envelopeText(t, r)
			if !r.IsError || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument {
				t.Fatalf("result %v: want INVALID_ARGUMENT", text(r))
			}
			for _, w := range tc.want {
				if !strings.Contains(env.Error.Message, w) {
					t.Errorf("message %q does not contain %s", env.Error.Message, w)
				}
			}
			if _, ok := mcpadapter.ReadEnvelope(r); ok {
				t.Errorf("a refused call has an envelope in _meta: nothing ran")
			}
		})
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Errorf("the service ran %d times for invalid arguments", n)
	}
	if n := len(f.rec.Events()); n != 0 {
		t.Errorf("invalid arguments opened executions: %d events", n)
	}
}

// TestRefusedBeforeTheEngine: a Connect error from the service's own
// interceptors, before agentsafe's, has no envelope; its code is read back
// through the wire table, and Unknown and Internal messages are concealed.
func TestRefusedBeforeTheEngine(t *testing.T) {
	f := newFixture(t, fixtureConfig{})
	for _, tc := range []struct {
		connect string
		want    middleware.Code
		message string
	}{
		{"resource_exhausted", middleware.CodeResourceExhausted, "refused by the service: resource_exhausted"},
		{"invalid_argument", middleware.CodeInvalidArgument, "refused by the service: invalid_argument"},
		{"deadline_exceeded", middleware.CodeCancelled, "refused by the service: deadline_exceeded"},
		{"permission_denied", middleware.CodeExecutionFailed, "refused by the service: permission_denied"},
		{"internal", middleware.CodeExecutionFailed, adapter.ConcealedMessage},
		{"context", middleware.CodeCancelled, "the call was cancelled before it ran"}, // never Go's "context canceled"
	} {
		t.Run(tc.connect, func(t *testing.T) {
			b, err := mcpadapter.New(f.eng, f.mux, []string{testv1connect.TestServiceName}, bearer("refuse:"+tc.connect))
			if err != nil {
				t.Fatal(err)
			}
			r := callTool(t, connectInMemory(t, b, nil), "read", map[string]any{"id": "x"})
			env := envelopeText(t, r)
			if !r.IsError || env.ExecutionID != "" || env.Error == nil || env.Error.Code != tc.want || env.Error.Message != tc.message || env.Status != tc.want.Status() {
				t.Errorf("result %v: want %s %q with no execution", text(r), tc.want, tc.message)
			}
		})
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Errorf("refused calls ran the handler %d times", n)
	}
}

// TestCancellation: a cancelled MCP request over streamable HTTP cancels
// the execution, which ends CANCELLED, and the handler's context ends.
// (Over the in-memory transport this is the conformance rule "Cancel/the
// caller's cancellation is CANCELLED and never retried".)
func TestCancellation(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	cs := connectHTTP(t, f.bridge, agent.ID, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"id": "c1", "mode": "block"}})
		done <- err
	}()
	f.waitStarted(t, "c1")
	cancel()
	select {
	case err := <-f.svc.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(waitBound):
		t.Fatal("the cancellation did not reach the handler")
	}
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error to the client")
	}
	x := f.svc.executions()[0]
	if e := f.final(t, x.ID); e.Type != middleware.EventCancelled || e.Code != middleware.CodeCancelled {
		t.Errorf("final event %s %s, want capability.cancelled CANCELLED", e.Type, e.Code)
	}
	if n := len(f.svc.executions()); n != 1 {
		t.Errorf("the handler ran %d times: a cancellation is never retried", n)
	}
}

// TestProgress: a client that sends a progress token gets one
// notification per runtime retry, before the result.
func TestProgress(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcpadapter.Bridge, *mcp.ClientOptions) *mcp.ClientSession) {
		f := newFixture(t, fixtureConfig{
			engineOpts: []middleware.Option{middleware.WithEventSink(mcpadapter.ProgressSink())},
			bridgeOpts: []mcpadapter.Option{bearer(agent.ID)},
		})
		got := make(chan *mcp.ProgressNotificationParams, 16)
		cs := connect(f.bridge, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			got <- r.Params
		}})
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		params := &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"id": "p1", "mode": "flaky", "failTimes": 2}}
		params.SetProgressToken("tok-1")
		r, err := cs.CallTool(ctx, params)
		if err != nil || r.IsError {
			t.Fatalf("call: %v %v", err, text(r))
		}
		// Notifications are sent before the result, but a client may
		// dispatch them on another goroutine.
		for i := range 2 {
			select {
			case p := <-got:
				if p.ProgressToken != "tok-1" || p.Progress != float64(i+2) || p.Total != 3 || !strings.Contains(p.Message, "EXECUTION_FAILED") {
					t.Errorf("notification %d: %+v, want token tok-1, progress %d of 3", i, p, i+2)
				}
			case <-ctx.Done():
				t.Fatalf("%d progress notifications, want 2 (one per retry)", i)
			}
		}

		callTool(t, cs, "read", map[string]any{"id": "p2", "mode": "flaky", "failTimes": 1})
		select {
		case p := <-got:
			t.Errorf("a call without a progress token got a notification: %+v", p)
		default:
		}
	})
}

// TestIdentity: over streamable HTTP the bearer token of the MCP request is
// what the service authenticates and the engine's actor function sees; a
// request without one is refused by the service's own authentication.
func TestIdentity(t *testing.T) {
	f := newFixture(t, fixtureConfig{})
	alice := connectHTTP(t, f.bridge, "alice", nil)
	r := callTool(t, alice, "read", map[string]any{"id": "i1"})
	if r.IsError || structured(t, r)["note"] != "alice" {
		t.Fatalf("result %v: want the call run for alice", text(r))
	}
	x := f.svc.executions()[0]
	if x.Actor.ID != "alice" {
		t.Errorf("the engine's actor is %q, want alice", x.Actor.ID)
	}

	anonymous := connectHTTP(t, f.bridge, "", nil)
	r = callTool(t, anonymous, "read", map[string]any{"id": "i2"})
	env := envelopeText(t, r)
	if !r.IsError || env.Error.Code != middleware.CodeUnauthenticated || env.Error.Message != "a bearer token is required" {
		t.Fatalf("anonymous call: %+v %+v, want the service's UNAUTHENTICATED", env, env.Error)
	}
	if n := len(f.svc.executions()); n != 1 {
		t.Errorf("an anonymous call ran the handler")
	}

	// In memory there are no headers: without a header function the call
	// carries no credentials and is refused the same way.
	r = callTool(t, connectInMemory(t, f.bridge, nil), "read", map[string]any{"id": "i3"})
	if env := envelopeText(t, r); env.Error == nil || env.Error.Code != middleware.CodeUnauthenticated {
		t.Fatalf("in-memory call without credentials: %+v", env)
	}
}

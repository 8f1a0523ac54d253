package mcpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for one test, or skips without one
// unless AGENTSAFE_REQUIRE_BROWSER=1 (CI).
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("AGENTSAFE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("AGENTSAFE_REQUIRE_BROWSER=1 but there is no Chromium at %s: %v", chromiumPath, err)
		}
		t.Skipf("skipped: no Chromium at %s; set AGENTSAFE_REQUIRE_BROWSER=1 to fail instead", chromiumPath)
	}
	ctx, cancelTimeout := context.WithTimeout(t.Context(), time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelTab(); cancelAlloc(); cancelTimeout() })
	return tabCtx
}

// multiRoundTrip serves f's bridge statelessly, as multi-round-trip
// clients (2026-07-28, the go-sdk's default) are served: they receive the
// input-required result themselves. Sessions of 2025-11-25 keep the
// stateful server, which elicits for them.
func (f *flow) multiRoundTrip(t *testing.T, protocol string) {
	if protocol != "" && protocol < "2026-07-28" {
		return
	}
	f.srv = httptest.NewServer(f.bridge.Handler(&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(f.srv.Close)
}

// flow is a bridge over HTTP whose engine links approvals to a console,
// served too, and seals with a result key.
type flow struct {
	*fixture
	console *httptest.Server
	link    func(string) string
	srv     *httptest.Server
}

func newFlow(t *testing.T, bridgeOpts ...mcpadapter.Option) *flow {
	t.Helper()
	return newFlowOn(t, approvalstore.NewMemory(), nil, bridgeOpts...)
}

// newFlowOn is newFlow on approvals, with more engine options.
func newFlowOn(t *testing.T, approvals store.ApprovalStore, engineOpts []middleware.Option, bridgeOpts ...mcpadapter.Option) *flow {
	t.Helper()
	f := &flow{}
	mux := http.NewServeMux()
	f.console = httptest.NewServer(mux)
	t.Cleanup(f.console.Close)
	f.link = approvalconsole.Link(f.console.URL + "/console")
	f.fixture = newFixture(t, fixtureConfig{
		engineOpts: append([]middleware.Option{middleware.WithApprovalURL(f.link), middleware.WithApprovalStore(approvals),
			middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")})}, engineOpts...),
		bridgeOpts: bridgeOpts,
	})
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(f.eng, func(r *http.Request) (middleware.Actor, error) {
		if c, err := r.Cookie("session"); err == nil && c.Value == "manager" {
			return manager, nil
		}
		return middleware.Actor{}, errors.New("sign in")
	})))
	f.srv = httptest.NewServer(f.bridge.Handler(nil))
	t.Cleanup(f.srv.Close)
	return f
}

// client is an MCP client of the flow's bridge over HTTP, as user (the
// bearer token the service turns into the actor).
func (f *flow) client(t *testing.T, user, protocol string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+user)
		return tr.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, copts).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: f.srv.URL, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// elicitingClient supports URL-mode elicitation: it reports each
// elicitation on asked and answers it with action, and each
// notifications/elicitation/complete on completed.
func elicitingClient(action string, asked chan<- *mcp.ElicitParams, completed chan<- string) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- r.Params
			return &mcp.ElicitResult{Action: action}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			completed <- r.Params.ElicitationID
		},
	}
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestApprovalByURLElicitationInTheBrowser: a client that supports
// URL-mode elicitation is asked once, with the approval's deep link; its
// call waits while a manager approves on the console page in a real
// browser, then completes, once. With the default protocol the client
// receives the input-required result; on 2025-11-25 the server elicits and
// also announces the completion.
func TestApprovalByURLElicitationInTheBrowser(t *testing.T) {
	for _, protocol := range []string{"", "2025-11-25"} {
		t.Run("protocol "+cmpOr(protocol, "default"), func(t *testing.T) {
			ctx := browser(t)
			f := newFlow(t)
			f.multiRoundTrip(t, protocol)
			asked, completed := make(chan *mcp.ElicitParams, 4), make(chan string, 4)
			cs := f.client(t, agent.ID, protocol, elicitingClient("accept", asked, completed))
			type outcome struct {
				r   *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "gated", Arguments: map[string]any{"id": "refund-1", "amount": 12000}})
				done <- outcome{r, err}
			}()
			p := receive(t, asked, "elicitation")
			id := p.ElicitationID
			if p.Mode != "url" || !strings.HasPrefix(id, "apr_") || p.URL != f.link(id) {
				t.Fatalf("the elicitation: mode %q, id %q, URL %q; want url mode, the approval id and its deep link", p.Mode, id, p.URL)
			}
			if rec, err := f.eng.Get(t.Context(), id); err != nil || rec.Status != store.ApprovalPending {
				t.Fatalf("the approval behind the elicitation: %+v, %v", rec, err)
			}
			if n := len(f.svc.executions()); n != 0 {
				t.Fatalf("the handler ran %d times before anyone approved", n)
			}
			card := `.approval[data-id="` + id + `"]`
			err := chromedp.Do(ctx,
				signIn(f.console.URL, "manager"),
				chromedp.Navigate(p.URL),
				chromedp.WaitVisible(chromedp.CSS(card+" button.approve")),
				chromedp.Click(chromedp.CSS(card+" button.approve")),
				chromedp.WaitVisible(chromedp.CSS(card+" .status.approved")),
			)
			if err != nil {
				t.Fatalf("approving in the browser: %v", err)
			}
			o := receive(t, done, "tool result")
			if o.err != nil {
				t.Fatalf("the tool call: %v", o.err)
			}
			if env, _ := mcpadapter.ReadEnvelope(o.r); o.r.IsError || env.Status != middleware.StatusCompleted || env.ApprovalID != id {
				t.Fatalf("the waiting call's result: %+v, envelope %+v", o.r, env)
			}
			if runs := f.svc.executions(); len(runs) != 1 || runs[0].Approval == nil || runs[0].Approval.ID != id {
				t.Fatalf("the handler ran %d times (%+v), want once under %s", len(runs), runs, id)
			}
			if len(asked) != 0 {
				t.Errorf("the client was asked again: %+v", <-asked)
			}
			if got := cs.InitializeResult().ProtocolVersion; protocol != "" && got != protocol || protocol == "" && got < "2026-07-28" {
				t.Errorf("the session speaks protocol %s", got)
			}
			if protocol == "2025-11-25" {
				if got := receive(t, completed, "notifications/elicitation/complete"); got != id {
					t.Errorf("elicitation completed for %q, want %q", got, id)
				}
			}
		})
	}
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// signIn sets the console's session cookie for url, as its login would.
func signIn(url, session string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, network.SetCookie, network.SetCookieParams{Name: "session", Value: session, URL: url})
		return chromedp.Void{}, err
	}
}

// manualClient supports URL-mode elicitation but handles input-required
// results itself, so a test can answer them as a hostile client would.
var manualClient = &mcp.ClientOptions{
	Capabilities:   &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
	MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
}

// answerRound sends the round that answers an elicitation: the tool, args,
// the request state and the client's accept.
func answerRound(t *testing.T, cs *mcp.ClientSession, args map[string]any, state, id string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitBound) // far below WithApprovalWait: a refusal never waits
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gated", Arguments: args, RequestState: state,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept"}}})
	if err != nil {
		t.Fatalf("the answering round: %v", err)
	}
	return r
}

func codeOfResult(r *mcp.CallToolResult) middleware.Code {
	env, ok := mcpadapter.ReadEnvelope(r)
	if texts := text(r); !ok && len(texts) > 0 {
		_ = env.UnmarshalJSON([]byte(texts[0])) // a refusal before the engine ran: its envelope as text
	}
	if env.Error == nil {
		if r.IsError {
			return middleware.CodeExecutionFailed
		}
		return middleware.CodeOK
	}
	return env.Error.Code
}

// TestApprovalElicitationHostileAnswers: the answering round re-checks
// everything before it waits: another actor presenting the request state,
// a changed input, tampered state, another approval's id are refused at
// once (well within a wait of 60 s), and nothing runs; a repeat of the
// request is not asked again; once approved, the answer runs the call once.
func TestApprovalElicitationHostileAnswers(t *testing.T) {
	f := newFlow(t)
	f.multiRoundTrip(t, "2026-07-28")
	victim := f.client(t, agent.ID, "2026-07-28", manualClient)
	args := map[string]any{"id": "refund-1", "amount": 12000}
	first := callTool(t, victim, "gated", args)
	if len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("the first call must ask for a decision: %+v", first)
	}
	var id string
	for k, ir := range first.InputRequests {
		p, ok := ir.(*mcp.ElicitParams)
		if !ok || p.Mode != "url" || p.ElicitationID != k || p.URL != f.link(k) {
			t.Fatalf("input request %q: %+v", k, ir)
		}
		id = k
	}
	if strings.Contains(first.RequestState, id) || strings.Contains(first.RequestState, "refund-1") {
		t.Errorf("the request state must be sealed: %q", first.RequestState)
	}

	attacker := f.client(t, "agent-9", "2026-07-28", manualClient)
	changed := map[string]any{"id": "refund-1", "amount": 99999}
	tampered := []byte(first.RequestState)
	tampered[len(tampered)/2] ^= 1
	other := map[string]any{"id": "refund-1", "amount": 12000, "_approval_id": "apr_00000000000000000000000000000000"}
	for _, c := range []struct {
		name string
		cs   *mcp.ClientSession
		args map[string]any
		st   string
		want middleware.Code
	}{
		{"another actor presents the state", attacker, args, first.RequestState, middleware.CodeApprovalNotFound},
		{"a changed input", victim, changed, first.RequestState, middleware.CodeApprovalInputMismatch},
		{"tampered request state", victim, args, string(tampered), middleware.CodeInvalidArgument},
		{"another approval's id beside the state", victim, other, first.RequestState, middleware.CodeInvalidArgument},
	} {
		r := answerRound(t, c.cs, c.args, c.st, id)
		if got := codeOfResult(r); got != c.want || len(r.InputRequests) != 0 {
			t.Errorf("%s: %s (input requests %d), want %s", c.name, got, len(r.InputRequests), c.want)
		}
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("hostile answers ran the handler %d times", n)
	}
	if again := callTool(t, victim, "gated", args); len(again.InputRequests) != 0 || codeOfResult(again) != middleware.CodeApprovalRequired {
		t.Errorf("a repeat of a pending request must get the URL result, never a second elicitation: %+v", again)
	}

	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	if r := answerRound(t, victim, args, first.RequestState, id); codeOfResult(r) != middleware.CodeOK {
		t.Fatalf("the owner's answer once approved: %+v", r)
	}
	if r := answerRound(t, victim, args, first.RequestState, id); codeOfResult(r) != middleware.CodeApprovalConsumed {
		t.Errorf("answering again: %s, want APPROVAL_CONSUMED", codeOfResult(r))
	}
	if n := len(f.svc.executions()); n != 1 {
		t.Fatalf("the handler ran %d times, want once", n)
	}
}

// TestApprovalElicitationAnsweredWithoutDecision: the client's accept is
// not the approval: with nobody deciding, the answering round waits out
// WithApprovalWait and gives the URL result; the client is asked once and
// nothing runs.
func TestApprovalElicitationAnsweredWithoutDecision(t *testing.T) {
	for _, protocol := range []string{"", "2025-11-25"} {
		t.Run("protocol "+cmpOr(protocol, "default"), func(t *testing.T) {
			f := newFlow(t, mcpadapter.WithApprovalWait(200*time.Millisecond))
			f.multiRoundTrip(t, protocol)
			asked, completed := make(chan *mcp.ElicitParams, 4), make(chan string, 4)
			cs := f.client(t, agent.ID, protocol, elicitingClient("accept", asked, completed))
			r := callTool(t, cs, "gated", map[string]any{"id": "refund-1", "amount": 12000})
			if code := codeOfResult(r); code != middleware.CodeApprovalPending || len(r.InputRequests) != 0 {
				t.Fatalf("an accept without a decision: %s, %d input requests; want the URL result (APPROVAL_PENDING)", code, len(r.InputRequests))
			}
			env, _ := mcpadapter.ReadEnvelope(r)
			if m, ok := awaitingMeta(r); !ok || m["approvalUrl"] != f.link(env.ApprovalID) {
				t.Errorf("the URL result must carry the deep link: %v", r.Meta)
			}
			if len(asked) != 1 || len(completed) != 0 {
				t.Errorf("asked %d times and completed %d times, want asked once, never completed", len(asked), len(completed))
			}
			if n := len(f.svc.executions()); n != 0 {
				t.Fatalf("the handler ran %d times without a decision", n)
			}
		})
	}
}

// TestApprovalsResumeWithoutElicitation: a client without elicitation gets
// the URL result; once approved, approvals_resume runs the call from the
// arguments kept sealed with the record, as the same actor, once. Another
// actor's resume of the id is not found, and runs nothing.
func TestApprovalsResumeWithoutElicitation(t *testing.T) {
	f := newFlow(t)
	cs := f.client(t, agent.ID, "", nil)
	r := callTool(t, cs, "gated", map[string]any{"id": "refund-1", "amount": 12000})
	env, _ := mcpadapter.ReadEnvelope(r)
	if codeOfResult(r) != middleware.CodeApprovalRequired || len(r.InputRequests) != 0 {
		t.Fatalf("a client without elicitation: %+v", r)
	}
	id := env.ApprovalID
	if m, ok := awaitingMeta(r); !ok || m["approvalUrl"] != f.link(id) {
		t.Errorf("the URL result: %v", r.Meta)
	}
	if rec, _ := f.eng.Get(t.Context(), id); len(rec.Payload) == 0 || strings.Contains(string(rec.Payload), "refund-1") {
		t.Errorf("the record must keep the arguments, sealed: %q", rec.Payload)
	}
	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	attacker := f.client(t, "agent-9", "", nil)
	for _, c := range []struct {
		name string
		cs   *mcp.ClientSession
		id   string
	}{{"another actor", attacker, id}, {"an unknown id", cs, "apr_00000000000000000000000000000000"}} {
		if got := codeOfResult(callTool(t, c.cs, "approvals_resume", map[string]any{"approval_id": c.id})); got != middleware.CodeApprovalNotFound {
			t.Errorf("%s: %s, want APPROVAL_NOT_FOUND", c.name, got)
		}
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("refused resumes ran the handler %d times", n)
	}
	done := callTool(t, cs, "approvals_resume", map[string]any{"approval_id": id})
	if codeOfResult(done) != middleware.CodeOK || structured(t, done)["id"] != "refund-1" {
		t.Fatalf("the owner's approvals_resume: %+v", done)
	}
	if got := codeOfResult(callTool(t, cs, "approvals_resume", map[string]any{"approval_id": id})); got != middleware.CodeApprovalConsumed {
		t.Errorf("a second approvals_resume: %s, want APPROVAL_CONSUMED", got)
	}
	if runs := f.svc.executions(); len(runs) != 1 || runs[0].Actor.ID != agent.ID {
		t.Fatalf("the handler ran %d times (%+v), want once as %s", len(runs), runs, agent.ID)
	}
}

// endings reports the final events of executions after the first one (a
// gated first call ends in capability.failed, APPROVAL_REQUIRED).
type endings chan middleware.Event

func (c endings) HandleEvent(_ context.Context, e middleware.Event) {
	if e.Type.Final() && e.Code != middleware.CodeApprovalRequired {
		c <- e
	}
}

// gets reports each Get of the approval store on a channel, once armed:
// the answering round reads the pending record just before it waits.
type gets struct {
	store.ApprovalStore
	armed chan chan struct{}
}

func (g *gets) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	select {
	case ch := <-g.armed:
		defer close(ch)
	default:
	}
	return g.ApprovalStore.Get(ctx, id)
}

// TestApprovalElicitationCancelledWhileWaiting: the client cancelling the
// answering round while it waits for the decision runs nothing and spends
// nothing: approved afterwards, the approval still runs the call, once.
func TestApprovalElicitationCancelledWhileWaiting(t *testing.T) {
	g := &gets{ApprovalStore: approvalstore.NewMemory(), armed: make(chan chan struct{}, 1)}
	ended := endings(make(chan middleware.Event, 8))
	f := newFlowOn(t, g, []middleware.Option{middleware.WithEventSink(ended)})
	f.multiRoundTrip(t, "2026-07-28")
	cs := f.client(t, agent.ID, "2026-07-28", manualClient)
	args := map[string]any{"id": "refund-1", "amount": 12000}
	first := callTool(t, cs, "gated", args)
	if len(first.InputRequests) != 1 {
		t.Fatalf("the first call must ask for a decision: %+v", first)
	}
	var id string
	for k := range first.InputRequests {
		id = k
	}
	waiting := make(chan struct{})
	g.armed <- waiting
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gated", Arguments: args, RequestState: first.RequestState,
			InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept"}}})
		done <- err
	}()
	receive(t, waiting, "the answering round reading the pending approval")
	cancel()
	if err := receive(t, done, "the cancelled call's end"); err == nil {
		t.Fatal("the cancelled answering round returned a result")
	}
	// The client has left; the server's round ends when it learns so.
	if e := receive(t, ended, "the answering round's end"); e.Type != middleware.EventCancelled || e.Attempts != 0 {
		t.Fatalf("the cancelled answering round ended with %s after %d attempts, want capability.cancelled before any", e.Type, e.Attempts)
	}
	if rec, err := f.eng.Get(t.Context(), id); err != nil || rec.Status != store.ApprovalPending {
		t.Fatalf("after the cancellation the approval is %v (%v), want still pending", rec.Status, err)
	}
	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("the cancelled round ran the handler %d times", n)
	}
	if r := answerRound(t, cs, args, first.RequestState, id); codeOfResult(r) != middleware.CodeOK || len(f.svc.executions()) != 1 {
		t.Fatalf("answering again once approved: %s, %d runs; want it to run once", codeOfResult(r), len(f.svc.executions()))
	}
}

// TestApprovalRequestStateIsBoundToItsTool: the request state one tool
// handed out is refused by another, as tampered state is, and runs
// nothing there.
func TestApprovalRequestStateIsBoundToItsTool(t *testing.T) {
	f := newFlow(t)
	f.multiRoundTrip(t, "2026-07-28")
	cs := f.client(t, agent.ID, "2026-07-28", manualClient)
	args := map[string]any{"id": "refund-1", "amount": 12000}
	first := callTool(t, cs, "gated", args)
	if len(first.InputRequests) != 1 || first.RequestState == "" {
		t.Fatalf("the first call must ask for a decision: %+v", first)
	}
	var id string
	for k := range first.InputRequests {
		id = k
	}
	if _, err := f.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
		t.Fatal(err)
	}
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write", Arguments: args, RequestState: first.RequestState,
		InputResponses: mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := codeOfResult(r); got != middleware.CodeInvalidArgument {
		t.Errorf("another tool's request state: %s, want INVALID_ARGUMENT", got)
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("another tool's request state ran a handler %d times", n)
	}
	if r := answerRound(t, cs, args, first.RequestState, id); codeOfResult(r) != middleware.CodeOK {
		t.Errorf("the approval must still run its own call once: %s", codeOfResult(r))
	}
}

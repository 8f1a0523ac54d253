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
	f := &flow{}
	mux := http.NewServeMux()
	f.console = httptest.NewServer(mux)
	t.Cleanup(f.console.Close)
	f.link = approvalconsole.Link(f.console.URL + "/console")
	f.fixture = newFixture(t, fixtureConfig{
		engineOpts: []middleware.Option{middleware.WithApprovalURL(f.link),
			middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")})},
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

package mcpadapter_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHandlerChecksOrigin: the bridge's handler refuses a request whose
// Origin is neither the server's own (its scheme and Host) nor trusted,
// 403, on every method — the SSE GET, DELETE, OPTIONS and HEAD included,
// on an established session, and on the stateless 2026-07-28 path — and
// before anything else (a valid session id does not help). A request
// without Origin, from its own origin or a trusted one goes on. The SDK's
// Host check against DNS rebinding stays.
func TestHandlerChecksOrigin(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID),
		mcpadapter.WithTrustedOrigins("https://Console.Example.com:443", "http://localhost:6274")}})
	srv := httptest.NewServer(f.bridge.Handler(nil))
	t.Cleanup(srv.Close)
	c := newRawMCP(t, srv.URL, "")
	c.initialize()

	evil := http.Header{"Origin": {"http://evil.example.com"}, "Sec-Fetch-Site": {"cross-site"}}
	listTools := `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete, http.MethodOptions, http.MethodHead} {
		for name, origin := range map[string]string{
			"a cross-site origin":               "http://evil.example.com",
			"the server's host over https":      strings.Replace(srv.URL, "http://", "https://", 1),
			"the server's host on another port": srv.URL[:strings.LastIndex(srv.URL, ":")] + ":1",
			"an opaque origin":                  "null",
			"not an origin":                     "http://evil.example.com/path",
		} {
			body := ""
			if method == http.MethodPost {
				body = listTools
			}
			res := c.request(method, body, http.Header{"Origin": {origin}})
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("%s with %s (%q): %s, want 403", method, name, origin, res.Status)
			}
		}
	}
	stateless := evil.Clone()
	stateless.Set("Mcp-Protocol-Version", "2026-07-28")
	if res := c.request(http.MethodPost, listTools, stateless); res.Body.Close() != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site 2026-07-28 request: %s, want 403", res.Status)
	}
	two := http.Header{"Origin": {srv.URL, "http://evil.example.com"}}
	if res := c.request(http.MethodPost, listTools, two); res.Body.Close() != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("two Origin headers: %s, want 403", res.Status)
	}
	// DNS rebinding: a loopback server reached under another name.
	rebound, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(listTools))
	rebound.Host = "evil.example.com"
	rebound.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Session-Id": {c.session}}
	if res := c.send(rebound); res.Body.Close() != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("a rebound Host: %s, want 403", res.Status)
	}

	for name, origin := range map[string]string{
		"no Origin":            "",
		"its own origin":       srv.URL,
		"its own, in capitals": strings.ToUpper(srv.URL[:4]) + srv.URL[4:],
		"a trusted origin":     "http://localhost:6274",
		"a trusted origin, default port written as configured": "https://console.example.com",
	} {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		res := c.request(http.MethodPost, listTools, h)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"tools"`) {
			t.Errorf("tools/list with %s: %s %s, want the tools", name, res.Status, b)
		}
	}
	// The SSE GET of the session, from its own origin, opens.
	get := c.request(http.MethodGet, "", http.Header{"Origin": {srv.URL}})
	get.Body.Close()
	if get.StatusCode != http.StatusOK {
		t.Errorf("the session's GET stream from its own origin: %s", get.Status)
	}
}

// TestTrustedOriginsAreChecked: New refuses what is not an origin, naming
// every one at once.
func TestTrustedOriginsAreChecked(t *testing.T) {
	f := newFixture(t, fixtureConfig{})
	_, err := mcpadapter.New(f.eng, f.mux, []string{testv1connect.TestServiceName},
		mcpadapter.WithTrustedOrigins("https://ok.example.com", "ok.example.com", "https://ok.example.com/app", "*"))
	if err == nil {
		t.Fatal("New accepted origins that are not origins")
	}
	for _, bad := range []string{`"ok.example.com"`, `"https://ok.example.com/app"`, `"*"`} {
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("the error %q does not name %s", err, bad)
		}
	}
}

// TestHandlerServesBothProtocols: the default handler serves each request
// by the protocol it asks for: a client of 2026-07-28 (the SDK's default)
// is served statelessly, with multi-round-trip results; one of 2025-11-25
// gets a session, with its GET stream.
func TestHandlerServesBothProtocols(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	for _, protocol := range []string{"", "2026-07-28", "2025-11-25"} {
		t.Run("protocol "+cmpOr(protocol, "default"), func(t *testing.T) {
			srv := httptest.NewServer(f.bridge.Handler(nil))
			t.Cleanup(srv.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil).
				Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: tr}}, &mcp.ClientSessionOptions{ProtocolVersion: protocol})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			want := cmpOr(protocol, "2026-07-28")
			if got := cs.InitializeResult().ProtocolVersion; got != want {
				t.Errorf("the session speaks %s, want %s", got, want)
			}
			if stateful := cs.ID() != ""; stateful != (want < "2026-07-28") {
				t.Errorf("session id %q on %s: stateful must be exactly 2025-11-25", cs.ID(), want)
			}
			if r := callTool(t, cs, "read", map[string]any{"id": "p1"}); r.IsError || structured(t, r)["id"] != "p1" {
				t.Errorf("a read on %s: %+v", want, r)
			}
		})
	}
}

// dropAfterFirstEvent is an http.RoundTripper that cuts the event stream
// of a tools/call after its first event (the priming event), as a lost
// connection would, and reports it on dropped; it records the
// Last-Event-ID of every GET.
type dropAfterFirstEvent struct {
	tr      *http.Transport
	dropped chan struct{}
	mu      sync.Mutex
	resumed []string
	cut     *cutAfterEvent
}

func (d *dropAfterFirstEvent) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
		d.mu.Lock()
		d.resumed = append(d.resumed, r.Header.Get("Last-Event-ID"))
		d.mu.Unlock()
	}
	call := false
	if r.Method == http.MethodPost && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		call = bytes.Contains(body, []byte(`"tools/call"`))
	}
	res, err := d.tr.RoundTrip(r)
	if err != nil || !call || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, err
	}
	d.cut = &cutAfterEvent{body: res.Body, dropped: d.dropped}
	res.Body = d.cut
	return res, nil
}

// cutAfterEvent passes its body through up to the end of the first
// event, then closes the connection and fails the read.
type cutAfterEvent struct {
	body    io.ReadCloser
	dropped chan struct{}
	seen    []byte
	cut     bool
}

func (c *cutAfterEvent) Read(p []byte) (int, error) {
	if c.cut {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := c.body.Read(p[:1]) // a byte at a time, to stop at the event's end
	c.seen = append(c.seen, p[:n]...)
	if bytes.HasSuffix(c.seen, []byte("\n\n")) {
		c.cut = true
		c.body.Close()
		close(c.dropped)
	}
	return n, err
}

func (c *cutAfterEvent) Close() error { return c.body.Close() }

// TestStreamResumesAfterALostConnection: on a 2025-11-25 session, a
// client whose connection drops in the middle of a call (after the
// stream's priming event, before the result) reconnects with a GET
// carrying Last-Event-ID and gets the rest: the tool result with its
// envelope. The call runs once and ends in one final event; nothing is
// called again.
func TestStreamResumesAfterALostConnection(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	srv := httptest.NewServer(f.bridge.Handler(nil))
	t.Cleanup(srv.Close)
	d := &dropAfterFirstEvent{tr: &http.Transport{}, dropped: make(chan struct{})}
	t.Cleanup(d.tr.CloseIdleConnections)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: d}},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	type outcome struct {
		r   *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"id": "r1", "mode": "hold"}})
		done <- outcome{r, err}
	}()
	release := sync.OnceFunc(func() { close(f.svc.release) })
	t.Cleanup(release) // a failing test lets the handler go too
	f.waitStarted(t, "r1")
	select {
	case <-d.dropped:
	case <-time.After(waitBound):
		t.Fatal("the call's stream sent no event while the call ran: no priming event, nothing to resume from")
	}
	release() // the result comes after the drop
	o := receive(t, done, "the call's result")
	if o.err != nil {
		t.Fatalf("the call whose connection dropped: %v", o.err)
	}
	env, ok := mcpadapter.ReadEnvelope(o.r)
	runs := f.svc.executions()
	if !ok || o.r.IsError || len(runs) != 1 || env.ExecutionID != runs[0].ID || structured(t, o.r)["id"] != "r1" {
		t.Fatalf("the resumed result: %+v (envelope %+v, ok %v), runs %+v", o.r, env, ok, runs)
	}
	d.mu.Lock()
	resumed := d.resumed
	d.mu.Unlock()
	first, _ := newEvents(bytes.NewReader(d.cut.seen)).next()
	if first.id == "" || first.data != "" || len(resumed) != 1 || resumed[0] != first.id {
		t.Errorf("the client resumed with Last-Event-ID %v after the event %+v; want once, with the id of the priming event (an id, no data)", resumed, first)
	}
	f.endsOnce(t, env.ExecutionID, middleware.EventCompleted)
}

// TestCancelledCallKeepsItsEnvelope: a tool call the client cancels with
// notifications/cancelled in the middle of its run is still answered (the
// SDK answers every request), and that answer is the execution's own:
// its execution id, CANCELLED, the envelope in _meta, and none of Go's
// error text. The execution keeps its id and ends in one final event,
// capability.cancelled.
func TestCancelledCallKeepsItsEnvelope(t *testing.T) {
	f := newFixture(t, fixtureConfig{bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	srv := httptest.NewServer(f.bridge.Handler(nil))
	t.Cleanup(srv.Close)
	c := newRawMCP(t, srv.URL, "")
	c.initialize()
	res := c.request(http.MethodPost, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"write","arguments":{"id":"x1","mode":"block"}}}`, nil)
	defer res.Body.Close()
	f.waitStarted(t, "x1")
	n := c.request(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"the user stopped it"}}`, nil)
	n.Body.Close()
	if n.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %s", n.Status)
	}
	m, _ := newEvents(res.Body).response(t, "5")
	if m.Error != nil {
		t.Fatalf("the cancelled call was answered with a protocol error %+v, want its envelope", m.Error)
	}
	for _, leak := range []string{"context canceled", "context.Canceled", "deadline exceeded"} {
		if strings.Contains(string(m.Result), leak) {
			t.Errorf("the answer carries Go's error text %q: %s", leak, m.Result)
		}
	}
	var r mcp.CallToolResult
	if err := r.UnmarshalJSON(m.Result); err != nil {
		t.Fatal(err)
	}
	runs := f.svc.executions()
	env, ok := mcpadapter.ReadEnvelope(&r)
	if !ok || len(runs) != 1 || env.ExecutionID != runs[0].ID || env.Error == nil || env.Error.Code != middleware.CodeCancelled || !r.IsError {
		t.Fatalf("the answer to the cancelled call: %s (envelope %+v), runs %+v; want isError with the execution's envelope, CANCELLED", m.Result, env, runs)
	}
	if text := envelopeText(t, &r); text.ExecutionID != env.ExecutionID || text.Error == nil || text.Error.Code != middleware.CodeCancelled {
		t.Errorf("the answer's text: %+v, want the same envelope", text)
	}
	if e := f.endsOnce(t, env.ExecutionID, middleware.EventCancelled); e.Code != middleware.CodeCancelled {
		t.Errorf("the call ended %s, want CANCELLED", e.Code)
	}
}

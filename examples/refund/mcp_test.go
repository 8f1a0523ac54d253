package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// startedExports reports the execution id of every ExportReport as it
// starts: a strict audit sink, which the engine calls on the execution's
// goroutine just before the attempt, so the test learns it at once
// (export_report times out at 300 ms).
type startedExports chan string

func (c startedExports) Record(_ context.Context, e middleware.Event) error {
	if e.Type == middleware.EventStarted && strings.HasSuffix(e.Procedure, "/ExportReport") {
		c <- e.ExecutionID
	}
	return nil
}

// mcpServer serves the demo on a free port, with more engine options.
func mcpServer(t *testing.T, opts ...middleware.Option) *server {
	t.Helper()
	s, err := newServer(inMemory(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// mcpRequest sends one request to the demo's /mcp as the agent (see
// newMCPRequest).
func mcpRequest(t *testing.T, s *server, method, body string, more http.Header) *http.Response {
	t.Helper()
	res, err := http.DefaultClient.Do(newMCPRequest(t, s, method, body, more))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// newMCPRequest is a request to the demo's /mcp as the agent, with the
// headers of a streamable HTTP client and more.
func newMCPRequest(t *testing.T, s *server, method, body string, more http.Header) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.url+"/mcp", rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range more {
		req.Header[k] = v
	}
	return req
}

// awaitInitialized returns once the session has taken in its
// notifications/initialized: the SDK answers the notification's POST
// before it handles it, and a call it has not handled yet is refused as
// "invalid during session initialization".
func awaitInitialized(t *testing.T, s *server, h http.Header) {
	t.Helper()
	for range 1000 {
		b, _ := io.ReadAll(mcpRequest(t, s, http.MethodPost, `{"jsonrpc":"2.0","id":"ready","method":"tools/list"}`, h).Body)
		if !strings.Contains(string(b), "during session initialization") {
			return
		}
	}
	t.Fatal("the session never finished its initialization")
}

const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"v1"}}}`

// TestMCPChecksOrigin: the demo's /mcp refuses a web page of another site
// on every method, and serves its own origin and clients without Origin.
func TestMCPChecksOrigin(t *testing.T) {
	s := mcpServer(t)
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete, http.MethodOptions, http.MethodHead} {
		body := ""
		if method == http.MethodPost {
			body = initialize
		}
		res := mcpRequest(t, s, method, body, http.Header{"Origin": {"http://evil.example.com"}, "Sec-Fetch-Site": {"cross-site"}})
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s /mcp from http://evil.example.com: %s, want 403", method, res.Status)
		}
	}
	for name, h := range map[string]http.Header{"its own origin": {"Origin": {s.url}}, "no Origin": {}} {
		if res := mcpRequest(t, s, http.MethodPost, initialize, h); res.StatusCode != http.StatusOK {
			t.Errorf("initialize from %s: %s, want 200", name, res.Status)
		}
	}
}

// TestMCPCancelledExportKeepsItsEnvelope: an export_report that the client
// cancels while it runs is answered with its own envelope (its execution
// id, CANCELLED), not Go's "context canceled", and its audit trail ends
// in one capability.cancelled.
func TestMCPCancelledExportKeepsItsEnvelope(t *testing.T) {
	started := startedExports(make(chan string, 4))
	s := mcpServer(t, middleware.WithAuditSink(started))
	s.svc.ReportTime = time.Hour // it runs until cancelled
	res := mcpRequest(t, s, http.MethodPost, initialize, nil)
	session := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s, session %q", res.Status, session)
	}
	h := http.Header{"Mcp-Session-Id": {session}, "Mcp-Protocol-Version": {"2025-11-25"}}
	mcpRequest(t, s, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	awaitInitialized(t, s, h)
	// The call's response may start only with its answer: it is read
	// while the test cancels.
	calls := make(chan *http.Response, 1)
	req := newMCPRequest(t, s, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"export_report","arguments":{}}}`, h)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			res = &http.Response{Status: err.Error(), Body: io.NopCloser(strings.NewReader(""))}
		}
		calls <- res
	}()
	var id string
	select {
	case id = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("export_report did not start")
	}
	mcpRequest(t, s, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, h)

	var answer struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	var call *http.Response
	select {
	case call = <-calls:
		defer call.Body.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the cancelled call")
	}
	sc := bufio.NewScanner(call.Body)
	for answer.ID != 1 && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			_ = json.Unmarshal([]byte(data), &answer)
		}
	}
	var result struct {
		IsError bool `json:"isError"`
		Meta    struct {
			Envelope middleware.Envelope `json:"agentsafe/envelope"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(answer.Result, &result); err != nil || answer.ID != 1 {
		t.Fatalf("the answer to the cancelled call: %s (%v)", answer.Result, err)
	}
	env := result.Meta.Envelope
	if !result.IsError || env.ExecutionID != id || env.Error == nil || env.Error.Code != middleware.CodeCancelled {
		t.Errorf("the cancelled export's answer: %s, want isError with its envelope (%s, CANCELLED)", answer.Result, id)
	}
	if strings.Contains(string(answer.Result), "context canceled") {
		t.Errorf("the answer carries Go's error text: %s", answer.Result)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	trail, err := s.audit.WaitFinal(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	finals := 0
	for _, e := range trail {
		if e.Type.Final() {
			finals++
		}
	}
	if last := trail[len(trail)-1]; finals != 1 || last.Type != middleware.EventCancelled {
		t.Errorf("the trail ends %s with %d final events, want one capability.cancelled", last.Type, finals)
	}
}

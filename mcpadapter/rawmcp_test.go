package mcpadapter_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawMCP speaks MCP's streamable HTTP transport by hand, for what the
// SDK's client does not let a test see or do: headers such as Origin and
// Last-Event-ID, event ids, a dropped stream, notifications/cancelled.
type rawMCP struct {
	t       *testing.T
	url     string
	header  http.Header // sent with every request
	session string      // Mcp-Session-Id, once initialized
	tr      *http.Transport
}

func newRawMCP(t *testing.T, url string, token string) *rawMCP {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &rawMCP{t: t, url: url, header: h, tr: tr}
}

// request sends one request with method and body (nil for none), the
// client's headers and more.
func (c *rawMCP) request(method, body string, more http.Header) *http.Response {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	for k, v := range more {
		req.Header[k] = v
	}
	return c.send(req)
}

// send sends req as it is.
func (c *rawMCP) send(req *http.Request) *http.Response {
	c.t.Helper()
	res, err := c.tr.RoundTrip(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

// initialize opens a 2025-11-25 session.
func (c *rawMCP) initialize() {
	c.t.Helper()
	res := c.request(http.MethodPost, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"v1"}}}`, nil)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		c.t.Fatalf("initialize: %s %s", res.Status, b)
	}
	c.session = res.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		c.t.Fatal("initialize: no Mcp-Session-Id")
	}
	c.t.Cleanup(func() { // end the session, as a client that is done does
		req, _ := http.NewRequest(http.MethodDelete, c.url, nil)
		req.Header = c.header.Clone()
		req.Header.Set("Mcp-Session-Id", c.session)
		if res, err := c.tr.RoundTrip(req); err == nil {
			res.Body.Close()
		}
	})
	io.Copy(io.Discard, res.Body)
	c.header.Set("Mcp-Protocol-Version", "2025-11-25")
	n := c.request(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	n.Body.Close()
	if n.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %s", n.Status)
	}
	// The SDK answers the notification's POST before it handles it, and
	// refuses a call it gets before as "invalid during session
	// initialization": wait until it took it in.
	for range 1000 {
		res := c.request(http.MethodPost, `{"jsonrpc":"2.0","id":"ready","method":"tools/list"}`, nil)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), "during session initialization") {
			return
		}
	}
	c.t.Fatal("the session never finished its initialization")
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, name, data string
}

// events reads server-sent events from r, one at a time.
type events struct{ sc *bufio.Scanner }

func newEvents(r io.Reader) *events {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	return &events{sc: sc}
}

// next returns the next event, or false at the end of the stream.
func (e *events) next() (sseEvent, bool) {
	var ev sseEvent
	seen := false
	for e.sc.Scan() {
		line := e.sc.Text()
		if line == "" {
			if seen {
				return ev, true
			}
			continue
		}
		seen = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.id = value
		case "event":
			ev.name = value
		case "data":
			if ev.data != "" {
				ev.data += "\n"
			}
			ev.data += value
		}
	}
	return ev, seen
}

// message is a JSON-RPC message as the tests read it.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// response reads events until the JSON-RPC response with id, and returns
// it with the events read.
func (e *events) response(t *testing.T, id string) (message, []sseEvent) {
	t.Helper()
	var seen []sseEvent
	for {
		ev, ok := e.next()
		if !ok {
			t.Fatalf("the stream ended without the response to %s (events %+v)", id, seen)
		}
		seen = append(seen, ev)
		var m message
		if ev.data != "" && json.Unmarshal([]byte(ev.data), &m) == nil && string(m.ID) == id && m.Method == "" {
			return m, seen
		}
	}
}

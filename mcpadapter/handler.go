package mcpadapter

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler returns an HTTP handler that serves the bridge's tools over
// MCP's streamable HTTP transport, from one server made by
// [Bridge.NewServer] with its defaults. Put the application's HTTP
// authentication in front of it: the default of [WithHeaders] forwards the
// Authorization header of each MCP request to the procedures.
//
// Each request is served by the protocol it asks for (its
// Mcp-Protocol-Version header), because go-sdk serves the two current
// ones in two ways:
//
//   - 2026-07-28 and later: statelessly (opts.Stateless set), as SEP-2575
//     has it: no session, no GET stream, no server-to-client requests, no
//     Last-Event-ID resumption. A reply lost with its connection is
//     recovered by calling again with the same "_idempotency_key", which
//     replays the first call's result (see "Repeating a call" in the
//     package documentation).
//   - 2025-11-25 and earlier: in a session, with resumable streams: every
//     server-sent event carries an id, a call's stream opens with a priming
//     event, and a client that lost the connection mid-call sends a GET
//     with Last-Event-ID and gets the rest of the stream — the tool result
//     and its envelope included — instead of calling again. The events are
//     kept in opts.EventStore; by default a store in memory that keeps at
//     most 10 MiB across all sessions, dropping the oldest events of every
//     stream first (a resume that needs a dropped event fails, and the
//     client calls again with its "_idempotency_key"), and forgets a
//     session's events when the session ends. Sessions and their events
//     live in this process (go-sdk has no shared session or event store):
//     several instances behind a load balancer need sticky sessions, by
//     the Mcp-Session-Id header. Idle sessions are closed after
//     opts.SessionTimeout when it is set (by default they stay until the
//     client ends them).
//
// opts may be nil. opts.Stateless serves every request statelessly, as
// for 2026-07-28. PropagateRequestCancellation is always set: a client
// that abandons a 2026-07-28 request cancels the tool call, so a call
// waiting for an approval's decision ends with nothing run or consumed.
//
// Every request is first checked for its Origin, whatever its method (GET
// and its event stream, DELETE, OPTIONS and HEAD included) and protocol:
// one whose Origin is neither the server's own — the scheme it came in on
// with its Host — nor trusted ([WithTrustedOrigins]) is refused, 403,
// because a web page of another site must not reach an MCP server through
// its user's browser. A request without Origin (a client that is not a
// browser) goes on. Behind a proxy that terminates TLS, the request comes
// in over HTTP while the browser's Origin says https: trust the public
// origin with WithTrustedOrigins. go-sdk's own check against DNS
// rebinding stays (a request that reached a loopback address under
// another Host is refused, 403, unless opts.DisableLocalhostProtection),
// since a rebound name makes the Origin and the Host agree. The handler
// writes no CORS headers: a browser client of a trusted origin needs a
// CORS handler in front of it.
func (b *Bridge) Handler(opts *mcp.StreamableHTTPOptions) http.Handler {
	s := b.NewServer(nil, nil)
	getServer := func(*http.Request) *mcp.Server { return s }
	o := mcp.StreamableHTTPOptions{}
	if opts != nil {
		o = *opts
	}
	o.PropagateRequestCancellation = true
	h := &handler{origins: b.origins}
	if o.Stateless {
		h.stateless = mcp.NewStreamableHTTPHandler(getServer, &o)
		return h
	}
	stateful := o
	if stateful.EventStore == nil {
		stateful.EventStore = mcp.NewMemoryEventStore(nil) // 10 MiB at most
	}
	h.stateful = mcp.NewStreamableHTTPHandler(getServer, &stateful)
	stateless := o
	stateless.Stateless, stateless.EventStore = true, nil // SEP-2575: nothing to resume
	h.stateless = mcp.NewStreamableHTTPHandler(getServer, &stateless)
	return h
}

// handler is [Bridge.Handler]'s: the Origin check, then the SDK's handler
// for the request's protocol.
type handler struct {
	origins map[string]bool
	// stateful serves protocols before multiRoundTrip; nil when every
	// request is served statelessly.
	stateful  http.Handler
	stateless http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.originAllowed(r) {
		http.Error(w, "Forbidden: cross-origin request", http.StatusForbidden)
		return
	}
	// The SDK compares protocol versions, which are dates, as strings.
	if h.stateful == nil || r.Header.Get("Mcp-Protocol-Version") >= multiRoundTrip {
		h.stateless.ServeHTTP(w, r)
		return
	}
	h.stateful.ServeHTTP(w, r)
}

// originAllowed reports whether r may be served: it has no Origin, or one
// Origin that is the server's own (the scheme r came in on and its Host)
// or trusted. An empty Origin is none, as for http.CrossOriginProtection.
func (h *handler) originAllowed(r *http.Request) bool {
	values := r.Header.Values("Origin")
	if len(values) == 0 || len(values) == 1 && values[0] == "" {
		return true
	}
	if len(values) > 1 {
		return false
	}
	origin, ok := parseOrigin(values[0])
	if !ok {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if self, ok := canonicalOrigin(scheme, r.Host); ok && origin == self {
		return true
	}
	return h.origins[origin]
}

// parseOrigin reads an Origin header value, or a configured origin, as
// its canonical form: "scheme://host[:port]", lowercased, without the
// scheme's default port. It refuses "null" and anything with a path, query,
// fragment or user.
func parseOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	return canonicalOrigin(u.Scheme, u.Host)
}

// canonicalOrigin is the canonical origin of scheme and host[:port].
func canonicalOrigin(scheme, host string) (string, bool) {
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", false
	}
	scheme, host = strings.ToLower(scheme), strings.ToLower(host)
	switch {
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	}
	return scheme + "://" + host, true
}

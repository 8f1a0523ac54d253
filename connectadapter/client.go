package connectadapter

import (
	"context"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// ClientInterceptor is a client-side [connect.Interceptor] that sends the
// current execution's idempotency key as the Idempotency-Key header on
// outgoing calls made from inside a governed handler, so the key reaches the
// downstream service where the effect lives. It sends it only to the hosts
// it was built with. On a handler it does nothing.
type ClientInterceptor struct {
	hosts []string
}

var _ connect.Interceptor = (*ClientInterceptor)(nil)

// NewClientInterceptor returns a client interceptor that sends the key to
// hosts: each is a host name or IP address, which matches any port, or
// host:port, which matches that port only (case-insensitive). With no hosts
// it sends the key nowhere, so an interceptor shared by mistake with a client
// of a third party leaks nothing.
//
// The key is the execution's idempotency key, or its sub-key for the label
// set on the call's context with [middleware.WithKeyLabel], so two different
// downstream calls of one execution carry two keys, each stable across
// runtime retries. An Idempotency-Key the application set on the request
// itself is kept. A call made outside a governed execution is sent unchanged.
func NewClientInterceptor(hosts ...string) *ClientInterceptor {
	c := &ClientInterceptor{}
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1] // a bare IPv6 literal
		}
		if h != "" {
			c.hosts = append(c.hosts, h)
		}
	}
	return c
}

// WrapUnary implements [connect.Interceptor].
func (c *ClientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient && c.allowed(req.Peer().Addr) {
			setKey(ctx, req.Header())
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements [connect.Interceptor].
func (c *ClientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if c.allowed(conn.Peer().Addr) {
			setKey(ctx, conn.RequestHeader())
		}
		return conn
	}
}

// WrapStreamingHandler implements [connect.Interceptor] with a no-op.
func (c *ClientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func setKey(ctx context.Context, h http.Header) {
	if h.Get(middleware.HeaderIdempotencyKey) != "" {
		return
	}
	if key, ok := middleware.OutgoingIdempotencyKey(ctx); ok {
		h.Set(middleware.HeaderIdempotencyKey, key)
	}
}

// allowed reports whether addr, a client peer address (the host[:port] of
// the client's base URL), is one of the listed hosts.
func (c *ClientInterceptor) allowed(addr string) bool {
	if len(c.hosts) == 0 || addr == "" {
		return false
	}
	addr = strings.ToLower(addr)
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	for _, h := range c.hosts {
		if h == addr || h == host {
			return true
		}
	}
	return false
}

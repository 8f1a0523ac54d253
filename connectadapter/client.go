package connectadapter

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// ClientInterceptor is a client-side [connect.Interceptor] that sends the
// current execution's idempotency key as the Idempotency-Key header on
// outgoing calls made from inside a governed handler, so the key reaches the
// downstream service where the effect lives. It sends it only to the hosts
// it was built with. On a handler it does nothing.
type ClientInterceptor struct {
	hosts middleware.KeyHosts
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
	return &ClientInterceptor{hosts: middleware.NewKeyHosts(hosts...)}
}

// WrapUnary implements [connect.Interceptor].
func (c *ClientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			setKey(ctx, c.hosts, req.Peer().Addr, req.Header())
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements [connect.Interceptor].
func (c *ClientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		setKey(ctx, c.hosts, conn.Peer().Addr, conn.RequestHeader())
		return conn
	}
}

// WrapStreamingHandler implements [connect.Interceptor] with a no-op.
func (c *ClientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// setKey keeps an Idempotency-Key the application set itself.
func setKey(ctx context.Context, hosts middleware.KeyHosts, addr string, h http.Header) {
	if h.Get(middleware.HeaderIdempotencyKey) != "" {
		return
	}
	if key, ok := hosts.Key(ctx, addr); ok {
		h.Set(middleware.HeaderIdempotencyKey, key)
	}
}

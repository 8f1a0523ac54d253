package connectadapter

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// ClientInterceptor is a client-side [connect.Interceptor] that sends the
// current execution's idempotency key as the Idempotency-Key header on
// outgoing calls made from inside a governed handler, so the key reaches the
// downstream service where the effect lives. It sends it only to the hosts
// it was built with. On a handler it does nothing.
//
// An interceptor cannot see redirects: it sets the header once, on the
// request to the host the client was built for, and Go's http.Client copies
// request headers onto the request of a 307 or 308 redirect (and of a 301,
// 302 or 303 that it follows with GET) to any host. Give the Connect client
// an *http.Client from [KeyHTTPClient] with the same hosts, so the key does
// not follow a redirect off the list.
type ClientInterceptor struct {
	hosts adapter.KeyHosts
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
//
// The interceptor does not see redirects; pair it with [KeyHTTPClient]:
//
//	hosts := []string{"payments.internal"}
//	payments := paymentsv1connect.NewPaymentServiceClient(
//		connectadapter.KeyHTTPClient(http.DefaultClient, hosts...), url,
//		connect.WithInterceptors(connectadapter.NewClientInterceptor(hosts...)))
func NewClientInterceptor(hosts ...string) *ClientInterceptor {
	return &ClientInterceptor{hosts: adapter.NewKeyHosts(hosts...)}
}

// KeyHTTPClient returns a copy of c (nil: a new client on
// http.DefaultTransport) that removes the Idempotency-Key header from a
// redirected request whose host is not one of hosts, matched as
// [NewClientInterceptor] matches them. Go's http.Client copies request
// headers onto a redirect to any host; a [ClientInterceptor] sets the key
// only on the first request and cannot see the redirect, so without this a
// key meant for a listed host would reach wherever that host redirects.
// A key the application set itself is removed there too.
//
// Redirects are otherwise followed as c would follow them: c's own
// CheckRedirect decides, after the key is removed; without one, Go's default
// policy applies (at most 10 redirects). c itself is not modified. With no
// hosts, every redirect loses the key.
func KeyHTTPClient(c *http.Client, hosts ...string) *http.Client {
	out := &http.Client{Transport: http.DefaultTransport}
	if c != nil {
		cp := *c
		out = &cp
	}
	allowed := adapter.NewKeyHosts(hosts...)
	check := out.CheckRedirect
	if check == nil {
		check = defaultCheckRedirect
	}
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !allowed.Allows(req.URL.Host) {
			req.Header.Del(adapter.HeaderIdempotencyKey)
		}
		return check(req, via)
	}
	return out
}

// defaultCheckRedirect is what http.Client does when its CheckRedirect is
// nil.
func defaultCheckRedirect(_ *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
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
func setKey(ctx context.Context, hosts adapter.KeyHosts, addr string, h http.Header) {
	if h.Get(adapter.HeaderIdempotencyKey) != "" {
		return
	}
	if key, ok := hosts.Key(ctx, addr); ok {
		h.Set(adapter.HeaderIdempotencyKey, key)
	}
}

package grpcadapter

import (
	"context"
	"net/http"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// EnvelopeFrom reads the envelope of a governed call back on the client,
// from the response header metadata (grpc.Header call option) and trailer
// (grpc.Trailer): the ids, and on failure the agentsafe code and whether
// re-invoking is safe. The message is the status's. When the error
// carries agentsafe's own agentsafe.v1.ErrorDetail for the same execution
// (an outcome agentsafe decided), it adds the procedure; a detail a
// handler relayed from another execution is ignored. It reports false when
// the call carried no envelope (an ungoverned method).
func EnvelopeFrom(header, trailer metadata.MD, err error) (middleware.Envelope, bool) {
	h := http.Header{}
	for _, md := range []metadata.MD{header, trailer} {
		for k, v := range md {
			h[http.CanonicalHeaderKey(k)] = v
		}
	}
	env, ok := adapter.ReadHeaders(h)
	if !ok || env.Error == nil {
		return env, ok
	}
	st := status.Convert(err)
	env.Error.Message = st.Message()
	for _, d := range st.Details() {
		if d, own := d.(*agentsafev1.ErrorDetail); own && d.GetExecutionId() == env.ExecutionID {
			env.Procedure = d.GetProcedure()
		}
	}
	return env, true
}

// UnaryClientInterceptor puts the idempotency key of the governed execution
// a call is made from (see [adapter.OutgoingKey]) on outgoing calls as
// idempotency-key metadata, only to the listed hosts (host or host:port,
// as the client connection's target names them). Calls made outside an
// execution, or to other hosts, are untouched, and so are calls whose
// outgoing metadata already carries an idempotency-key the application
// set itself.
//
// The key goes out as an RFC 9651 sf-string ("idk_…", quoted), the
// spelling draft-ietf-httpapi-idempotency-key-header gives it.
//
// Unlike Go's http.Client, gRPC follows no redirects: a call goes to the
// connection's target (one of the addresses it resolves to) and nowhere
// else, so the key is never carried off to a host that is not listed, the
// concern connectadapter.KeyHTTPClient addresses for Connect.
func UnaryClientInterceptor(hosts ...string) grpc.UnaryClientInterceptor {
	allowed := adapter.NewKeyHosts(hosts...)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(withKey(ctx, allowed, cc), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is [UnaryClientInterceptor] for streaming calls:
// the key goes in the stream's request metadata.
func StreamClientInterceptor(hosts ...string) grpc.StreamClientInterceptor {
	allowed := adapter.NewKeyHosts(hosts...)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(withKey(ctx, allowed, cc), desc, cc, method, opts...)
	}
}

// withKey adds the execution's key to the outgoing metadata of a call on
// cc when its target is listed, and the application did not set a key of
// its own: that one is kept, alone (two values would be a malformed key).
func withKey(ctx context.Context, hosts adapter.KeyHosts, cc *grpc.ClientConn) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(mdKey)) > 0 {
		return ctx
	}
	if key, ok := hosts.Key(ctx, targetAddr(cc.CanonicalTarget())); ok {
		return metadata.AppendToOutgoingContext(ctx, mdKey, key)
	}
	return ctx
}

// targetAddr is the host:port of a canonical target such as
// "dns:///host:port" or "passthrough:///host:port".
func targetAddr(target string) string {
	if i := strings.LastIndexByte(target, '/'); i >= 0 {
		return target[i+1:]
	}
	return target
}

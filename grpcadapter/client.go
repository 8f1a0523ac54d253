package grpcadapter

import (
	"context"
	"strconv"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// EnvelopeFrom reads the envelope of a governed call back on the client,
// from the response header metadata (grpc.Header call option) and trailer
// (grpc.Trailer) and, on failure, the error's agentsafe.v1.ErrorDetail. It
// reports false when the call carried no envelope (an ungoverned method).
func EnvelopeFrom(header, trailer metadata.MD, err error) (middleware.Envelope, bool) {
	md := metadata.Join(header, trailer)
	env := middleware.Envelope{Status: middleware.StatusCompleted}
	if v := md.Get(mdExecutionID); len(v) > 0 {
		env.ExecutionID = v[0]
	}
	if v := md.Get(mdAttempts); len(v) > 0 {
		env.Attempts, _ = strconv.Atoi(v[len(v)-1])
	}
	if v := md.Get(mdApprovalID); len(v) > 0 {
		env.ApprovalID = v[0]
	}
	if err != nil {
		st, _ := status.FromError(err)
		for _, d := range st.Details() {
			if detail, ok := d.(*agentsafev1.ErrorDetail); ok {
				env = middleware.EnvelopeFromDetail(detail, st.Message())
			}
		}
	}
	return env, env.ExecutionID != ""
}

// UnaryClientInterceptor puts the idempotency key of the governed execution
// a call is made from (see middleware.OutgoingIdempotencyKey) on outgoing
// calls as idempotency-key metadata, only to the listed hosts (host or
// host:port, as the client connection's target names them). Calls made
// outside an execution, or to other hosts, are untouched.
//
// Unlike Go's http.Client, gRPC follows no HTTP redirects: a call goes to
// the connection's target (one of the addresses it resolves to) and nowhere
// else, so the key is not carried off to a host that is not listed, the
// concern connectadapter.KeyHTTPClient addresses for Connect.
func UnaryClientInterceptor(hosts ...string) grpc.UnaryClientInterceptor {
	allowed := middleware.NewKeyHosts(hosts...)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if key, ok := allowed.Key(ctx, targetAddr(cc.CanonicalTarget())); ok {
			ctx = metadata.AppendToOutgoingContext(ctx, mdKey, key)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// targetAddr is the host:port of a canonical target such as
// "dns:///host:port" or "passthrough:///host:port".
func targetAddr(target string) string {
	if i := strings.LastIndexByte(target, '/'); i >= 0 {
		return target[i+1:]
	}
	return target
}

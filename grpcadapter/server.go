package grpcadapter

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The metadata keys of the wire format: gRPC metadata keys are the
// lower-case forms of the header names.
var (
	mdExecutionID = strings.ToLower(adapter.HeaderExecutionID)
	mdApprovalID  = strings.ToLower(adapter.HeaderApprovalID)
	mdKey         = strings.ToLower(adapter.HeaderIdempotencyKey)
)

// ServerOptions returns the interceptor pair that governs a server with
// eng, for grpc.NewServer. It panics if eng is nil.
func ServerOptions(eng *middleware.Engine) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(UnaryServerInterceptor(eng)), grpc.ChainStreamInterceptor(StreamServerInterceptor(eng))}
}

// UnaryServerInterceptor governs unary methods with eng. Methods the
// engine does not govern pass through untouched. It panics if eng is nil:
// a missing engine must not silently leave methods ungoverned.
func UnaryServerInterceptor(eng *middleware.Engine) grpc.UnaryServerInterceptor {
	mustEngine(eng)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		route := adapter.Resolve(eng, info.FullMethod)
		if !route.Governed() {
			return handler(ctx, req)
		}
		call := adapter.Call[*headerSink]{Surface: adapter.SurfaceRPC, Status: grpcStatus, IdempotencyKey: callerKey(ctx), Codec: newReplayCodec(info.FullMethod)}
		// Every value: two are malformed, never one of them taken silently.
		call.ApprovalID = adapter.ApprovalID(metadata.ValueFromIncomingContext(ctx, mdApprovalID))
		msg, _ := req.(proto.Message)
		var snapshot proto.Message // the request as the caller sent it, for attempts after the first
		if msg != nil {
			call.Input = adapter.ProtoInput(msg)
			if route.MayRetry() {
				snapshot = proto.Clone(msg)
			}
		}
		sink, env, err := adapter.Execute(ctx, route, call, func(ctx context.Context) (*headerSink, error) {
			in := req
			if x, _ := middleware.ExecutionFromContext(ctx); snapshot != nil && x.Attempt > 1 {
				in = proto.Clone(snapshot)
			}
			sink := &headerSink{method: info.FullMethod}
			resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, sink), in)
			sink.resp = resp
			return sink, err
		})
		if adapter.Hidden(err) {
			return nil, absent(info.FullMethod)
		}
		if sink != nil {
			sink.flush(ctx)
		}
		_ = grpc.SetHeader(ctx, envelopeMD(env))
		if err != nil {
			return nil, wireError(env, err)
		}
		if sink == nil { // a replay, and no descriptor to rebuild its response with
			return nil, status.Error(codes.Internal, "agentsafe: a stored result cannot be replayed without the method's descriptor linked")
		}
		return sink.resp, nil // a completed execution has its attempt's sink
	}
}

// StreamServerInterceptor governs streaming methods with eng: one attempt,
// run synchronously, never retried; the execution id goes out in the
// header metadata before the first message, the envelope in the trailer.
// It panics if eng is nil.
func StreamServerInterceptor(eng *middleware.Engine) grpc.StreamServerInterceptor {
	mustEngine(eng)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		route := adapter.Resolve(eng, info.FullMethod)
		if !route.Governed() {
			return handler(srv, ss)
		}
		env, err := adapter.ExecuteStream(ss.Context(), route, adapter.Call[struct{}]{Surface: adapter.SurfaceRPC, Status: grpcStatus}, func(ctx context.Context) error {
			if x, ok := middleware.ExecutionFromContext(ctx); ok {
				_ = ss.SetHeader(metadata.Pairs(mdExecutionID, x.ID))
			}
			// The handler's own metadata goes through filters that drop
			// the envelope's keys, whichever way it is set.
			if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
				ctx = grpc.NewContextWithServerTransportStream(ctx, ownTransport{ts})
			}
			return handler(srv, &stream{ServerStream: ss, ctx: ctx})
		})
		if adapter.Hidden(err) {
			return absent(info.FullMethod)
		}
		ss.SetTrailer(envelopeMD(env))
		return wireError(env, err)
	}
}

func mustEngine(eng *middleware.Engine) {
	if eng == nil {
		panic("grpcadapter: the interceptors need a non-nil *middleware.Engine")
	}
}

// grpcStatus is the adapter's one function from gRPC's errors to codes,
// for the engine: a status error (one a handler returned, or a downstream
// call's) has its code and message; every other error is not gRPC's own.
func grpcStatus(err error) (code uint32, message string, ok bool) {
	st, ok := status.FromError(err) // ok for nil too
	return uint32(st.Code()), st.Message(), ok && err != nil
}

// wireError is the error a governed call ends with. A status error the
// handler returned passes unchanged: code (Unknown included), message and
// details, less an agentsafe.v1.ErrorDetail it relayed from a downstream
// call, which names another execution. Every outcome the engine decided
// is a status with the mapped code and the envelope's message, and, unless
// the caller left, our detail.
func wireError(env middleware.Envelope, err error) error {
	if err == nil {
		return nil
	}
	if own, ok := adapter.HandlerError(err); ok {
		return withoutRelayedDetail(own)
	}
	st := status.New(codes.Code(adapter.RPCCode(err)), env.Error.Message)
	if adapter.CarriesDetail(err) {
		withDetail, derr := st.WithDetails(adapter.ErrorDetail(env))
		if ri := adapter.RetryInfo(env); ri != nil && derr == nil {
			withDetail, derr = withDetail.WithDetails(ri)
		}
		if derr == nil {
			st = withDetail
		}
	}
	return st.Err()
}

// withoutRelayedDetail returns err itself unless its status carries an
// agentsafe.v1.ErrorDetail; then the same status without it.
func withoutRelayedDetail(err error) error {
	p := status.Convert(err).Proto()
	n := len(p.Details)
	p.Details = slices.DeleteFunc(p.Details, func(d *anypb.Any) bool { return d.MessageIs((*agentsafev1.ErrorDetail)(nil)) })
	if len(p.Details) == n {
		return err
	}
	return status.FromProto(p).Err()
}

// envelopeMD is the envelope as metadata, in the header's lower-case names.
func envelopeMD(env middleware.Envelope) metadata.MD {
	md := make(metadata.MD, 2)
	adapter.SetMetadata(md, env)
	return md
}

// withoutEnvelope returns a copy of md without the envelope's keys, which
// are the engine's alone: a handler that sets or forwards them (from a
// downstream call's response, say) would otherwise put a second value on
// the wire, and EnvelopeFrom would read the handler's.
func withoutEnvelope(md metadata.MD) metadata.MD {
	if !hasEnvelope(md) {
		return md // nothing to drop; gRPC copies what it is given
	}
	md = md.Copy()
	maps.DeleteFunc(md, func(k string, _ []string) bool { return adapter.IsEnvelopeHeader(k) })
	return md
}

func hasEnvelope(md metadata.MD) bool {
	for k := range md {
		if adapter.IsEnvelopeHeader(k) {
			return true
		}
	}
	return false
}

// stream hands the handler the execution's context, and drops the
// envelope's keys from the metadata it sets.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }
func (s *stream) SetHeader(md metadata.MD) error {
	return s.ServerStream.SetHeader(withoutEnvelope(md))
}
func (s *stream) SendHeader(md metadata.MD) error {
	return s.ServerStream.SendHeader(withoutEnvelope(md))
}
func (s *stream) SetTrailer(md metadata.MD) { s.ServerStream.SetTrailer(withoutEnvelope(md)) }

// ownTransport is a stream's grpc.ServerTransportStream as its handler sees
// it (grpc.SetHeader and friends): the envelope's keys are dropped.
type ownTransport struct{ grpc.ServerTransportStream }

func (t ownTransport) SetHeader(md metadata.MD) error {
	return t.ServerTransportStream.SetHeader(withoutEnvelope(md))
}

func (t ownTransport) SendHeader(md metadata.MD) error {
	return t.ServerTransportStream.SendHeader(withoutEnvelope(md))
}

func (t ownTransport) SetTrailer(md metadata.MD) error {
	return t.ServerTransportStream.SetTrailer(withoutEnvelope(md))
}

// headerSink is one attempt's grpc.ServerTransportStream and its response:
// it keeps the headers and trailers the handler sets, so that only the
// finalized attempt's reach the client.
type headerSink struct {
	method  string
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
	resp    any
}

func (h *headerSink) Method() string { return h.method }

func (h *headerSink) SetHeader(md metadata.MD) error  { return h.keep(&h.header, md) }
func (h *headerSink) SetTrailer(md metadata.MD) error { return h.keep(&h.trailer, md) }

// SendHeader keeps the header too: it is sent with the response, once the
// attempt is known to be the finalized one.
func (h *headerSink) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

func (h *headerSink) keep(to *metadata.MD, md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*to = metadata.Join(*to, md)
	return nil
}

// flush copies the finalized attempt's headers and trailers to the real
// stream, without the envelope's keys: the interceptor sets those.
func (h *headerSink) flush(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if md := withoutEnvelope(h.header); len(md) > 0 {
		_ = grpc.SetHeader(ctx, md)
	}
	if md := withoutEnvelope(h.trailer); len(md) > 0 {
		_ = grpc.SetTrailer(ctx, md)
	}
}

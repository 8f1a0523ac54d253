package grpcadapter

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The metadata keys of the wire format: gRPC metadata keys are the
// lower-case forms of the middleware header names.
var (
	mdExecutionID = strings.ToLower(middleware.HeaderExecutionID)
	mdAttempts    = strings.ToLower(middleware.HeaderAttempts)
	mdApprovalID  = strings.ToLower(middleware.HeaderApprovalID)
	mdKey         = strings.ToLower(middleware.HeaderIdempotencyKey)
)

// ServerOptions returns the interceptor pair that governs a server with
// eng, for grpc.NewServer.
func ServerOptions(eng *middleware.Engine) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(UnaryServerInterceptor(eng)), grpc.ChainStreamInterceptor(StreamServerInterceptor(eng))}
}

// UnaryServerInterceptor governs unary methods with eng. Methods the
// engine does not govern pass through untouched.
func UnaryServerInterceptor(eng *middleware.Engine) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !eng.Governs(info.FullMethod) {
			return handler(ctx, req)
		}
		msg, _ := req.(proto.Message)
		call := middleware.Call{Procedure: info.FullMethod, ApprovalID: approvalID(ctx)}
		if msg != nil {
			call.Input = middleware.ProtoInput(msg)
		}
		v, env, err := eng.Execute(ctx, call, func(ctx context.Context) (any, error) {
			sink := &headerSink{method: info.FullMethod}
			in := req
			if msg != nil {
				in = proto.Clone(msg) // each attempt its own copy
			}
			resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, sink), in)
			if err != nil {
				return sink, classify(ctx, err)
			}
			sink.resp = resp
			return sink, nil
		})
		if sink, ok := v.(*headerSink); ok {
			sink.flush(ctx)
		}
		header := envelopeMD(env)
		_ = grpc.SetHeader(ctx, header)
		if err != nil {
			return nil, statusFor(env, err)
		}
		return v.(*headerSink).resp, nil // a completed execution always has its attempt's sink
	}
}

// StreamServerInterceptor governs streaming methods with eng: one attempt,
// run synchronously, never retried.
func StreamServerInterceptor(eng *middleware.Engine) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !eng.Governs(info.FullMethod) {
			return handler(srv, ss)
		}
		env, err := eng.ExecuteStream(ss.Context(), middleware.Call{Procedure: info.FullMethod}, func(ctx context.Context) error {
			if x, ok := middleware.ExecutionFromContext(ctx); ok {
				// The ids go out before the first message.
				_ = ss.SetHeader(metadata.Pairs(mdExecutionID, x.ID))
			}
			// The handler's own metadata goes through filters that drop
			// the envelope's keys, whichever way it is set.
			if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
				ctx = grpc.NewContextWithServerTransportStream(ctx, ownTransport{ts})
			}
			return handler(srv, &stream{ServerStream: ss, ctx: ctx})
		})
		ss.SetTrailer(envelopeMD(env))
		if err != nil {
			return statusFor(env, err)
		}
		return nil
	}
}

// classify translates a handler's status for the engine: Unavailable is
// transient, and DeadlineExceeded or Canceled once the attempt's context has
// ended means the handler honoured it (status errors do not wrap the
// context's), so the engine classifies by the context's cause.
func classify(ctx context.Context, err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		return middleware.Retryable(err)
	case codes.DeadlineExceeded, codes.Canceled:
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return err
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

// withoutEnvelope returns md without the envelope's keys, which are the
// engine's alone: a handler that sets or forwards them (from a downstream
// call's response, say) would otherwise put a second value on the wire,
// and EnvelopeFrom would read the handler's. md itself is not modified.
func withoutEnvelope(md metadata.MD) metadata.MD {
	var out metadata.MD
	for k := range md {
		switch strings.ToLower(k) {
		case mdExecutionID, mdAttempts, mdApprovalID:
			if out == nil {
				out = md.Copy()
			}
			delete(out, k)
		}
	}
	if out == nil {
		return md
	}
	return out
}

// headerSink is one attempt's grpc.ServerTransportStream: it keeps the
// headers and trailers the handler sets, so that only the finalized
// attempt's reach the client.
type headerSink struct {
	method  string
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
	resp    any
}

func (h *headerSink) Method() string { return h.method }

func (h *headerSink) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	h.header = metadata.Join(h.header, md)
	h.mu.Unlock()
	return nil
}

// SendHeader keeps the header too: it is sent with the response, once the
// attempt is known to be the finalized one.
func (h *headerSink) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

func (h *headerSink) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	h.trailer = metadata.Join(h.trailer, md)
	h.mu.Unlock()
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

func approvalID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(mdApprovalID); len(v) > 0 {
		return v[0]
	}
	return ""
}

func envelopeMD(env middleware.Envelope) metadata.MD {
	md := metadata.Pairs(mdExecutionID, env.ExecutionID, mdAttempts, strconv.Itoa(env.Attempts))
	if env.ApprovalID != "" {
		md.Set(mdApprovalID, env.ApprovalID)
	}
	return md
}

// statusFor is the error a governed call returns: a status the handler
// returned on purpose keeps its code and message (not its details), unless
// its code is Unknown; everything else takes the envelope's code and
// (concealed) message. Either way it carries the agentsafe.v1.ErrorDetail.
func statusFor(env middleware.Envelope, err error) error {
	e := env.Error
	if e == nil {
		return err
	}
	st := status.New(codes.Code(e.Code.RPCCode()), e.Message)
	var own interface{ GRPCStatus() *status.Status }
	if e.Code == middleware.CodeExecutionFailed && errors.As(err, &own) {
		if s := own.GRPCStatus(); s.Code() != codes.Unknown {
			st = status.New(s.Code(), s.Message())
		}
	}
	if withDetail, derr := st.WithDetails(env.ErrorDetail()); derr == nil {
		st = withDetail
	}
	return st.Err()
}

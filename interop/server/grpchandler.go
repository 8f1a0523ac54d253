package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// grpcService implements the ConformanceService with grpc-go, as the
// suite's grpc-go reference server does. Unimplemented is left to the
// embedded type, so the framework answers it.
type grpcService struct {
	conformancev1.UnimplementedConformanceServiceServer
	delay delay
}

func (s grpcService) Unary(ctx context.Context, req *conformancev1.UnaryRequest) (*conformancev1.UnaryResponse, error) {
	payload, err := grpcUnary(ctx, s.delay, req, req.GetResponseDefinition())
	if err != nil {
		return nil, err
	}
	return &conformancev1.UnaryResponse{Payload: payload}, nil
}

// IdempotentUnary is only ever called with Connect GET requests, which
// grpc-go does not serve; it is implemented so that every procedure of the
// service has a handler to govern.
func (s grpcService) IdempotentUnary(ctx context.Context, req *conformancev1.IdempotentUnaryRequest) (*conformancev1.IdempotentUnaryResponse, error) {
	payload, err := grpcUnary(ctx, s.delay, req, req.GetResponseDefinition())
	if err != nil {
		return nil, err
	}
	return &conformancev1.IdempotentUnaryResponse{Payload: payload}, nil
}

func grpcUnary(ctx context.Context, d delay, req proto.Message, def *conformancev1.UnaryResponseDefinition) (*conformancev1.ConformancePayload, error) {
	reqAny, err := grpcAsAny(req)
	if err != nil {
		return nil, err
	}
	if def != nil {
		if err := grpc.SendHeader(ctx, protoToMetadata(def.GetResponseHeaders())); err != nil {
			return nil, err
		}
		if err := grpc.SetTrailer(ctx, protoToMetadata(def.GetResponseTrailers())); err != nil {
			return nil, err
		}
		if err := d.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	return grpcUnaryOutcome(ctx, def, []*anypb.Any{reqAny})
}

func (s grpcService) ClientStream(stream grpc.ClientStreamingServer[conformancev1.ClientStreamRequest, conformancev1.ClientStreamResponse]) error {
	ctx := stream.Context()
	var def *conformancev1.UnaryResponseDefinition
	var reqs []*anypb.Any
	first := true
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if first {
			def, first = msg.GetResponseDefinition(), false
		}
		reqAny, err := grpcAsAny(msg)
		if err != nil {
			return err
		}
		reqs = append(reqs, reqAny)
	}
	if def != nil {
		if err := stream.SendHeader(protoToMetadata(def.GetResponseHeaders())); err != nil {
			return err
		}
		stream.SetTrailer(protoToMetadata(def.GetResponseTrailers()))
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return status.FromContextError(err).Err()
		}
	}
	payload, err := grpcUnaryOutcome(ctx, def, reqs)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&conformancev1.ClientStreamResponse{Payload: payload})
}

func (s grpcService) ServerStream(req *conformancev1.ServerStreamRequest, stream grpc.ServerStreamingServer[conformancev1.ServerStreamResponse]) error {
	ctx := stream.Context()
	reqAny, err := grpcAsAny(req)
	if err != nil {
		return err
	}
	def := req.GetResponseDefinition()
	if def == nil {
		return nil
	}
	// Send the headers now, so that the client can read them before the
	// first message.
	if err := stream.SendHeader(protoToMetadata(def.GetResponseHeaders())); err != nil {
		return err
	}
	stream.SetTrailer(protoToMetadata(def.GetResponseTrailers()))
	info := func() *conformancev1.ConformancePayload_RequestInfo {
		return requestInfo(ctx, incomingHeaders(ctx), nil, []*anypb.Any{reqAny})
	}
	sent := 0
	for _, data := range def.GetResponseData() {
		res := &conformancev1.ServerStreamResponse{Payload: &conformancev1.ConformancePayload{Data: data}}
		if sent == 0 {
			res.Payload.RequestInfo = info()
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return status.FromContextError(err).Err()
		}
		if err := stream.Send(res); err != nil {
			return status.Errorf(codes.Internal, "error sending on stream: %s", err)
		}
		sent++
	}
	if def.GetError() == nil {
		return nil
	}
	var extra []*anypb.Any
	if sent == 0 {
		infoAny, err := anypb.New(info())
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		extra = append(extra, infoAny)
	}
	return grpcError(def.GetError(), extra...)
}

func (s grpcService) BidiStream(stream grpc.BidiStreamingServer[conformancev1.BidiStreamRequest, conformancev1.BidiStreamResponse]) error {
	ctx := stream.Context()
	var def *conformancev1.StreamResponseDefinition
	var reqs []*anypb.Any
	fullDuplex, first, sent := false, true, 0
	info := func() *conformancev1.ConformancePayload_RequestInfo {
		return requestInfo(ctx, incomingHeaders(ctx), nil, reqs)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("receive request: %w", err)
		}
		reqAny, err := grpcAsAny(msg)
		if err != nil {
			return err
		}
		reqs = append(reqs, reqAny)
		if first {
			def, fullDuplex, first = msg.GetResponseDefinition(), msg.GetFullDuplex(), false
			if def != nil {
				if err := stream.SendHeader(protoToMetadata(def.GetResponseHeaders())); err != nil {
					return err
				}
				stream.SetTrailer(protoToMetadata(def.GetResponseTrailers()))
			}
		}
		if !fullDuplex {
			continue
		}
		if sent >= len(def.GetResponseData()) {
			break // nothing left to send: end with the error, if any
		}
		res := &conformancev1.BidiStreamResponse{Payload: &conformancev1.ConformancePayload{Data: def.GetResponseData()[sent]}}
		if sent == 0 {
			res.Payload.RequestInfo = info()
		} else {
			res.Payload.RequestInfo = &conformancev1.ConformancePayload_RequestInfo{Requests: reqs}
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return status.FromContextError(err).Err()
		}
		if err := stream.Send(res); err != nil {
			return status.Errorf(codes.Internal, "error sending on stream: %s", err)
		}
		sent++
		reqs = nil
	}
	if def == nil {
		return nil
	}
	for ; sent < len(def.GetResponseData()); sent++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		res := &conformancev1.BidiStreamResponse{Payload: &conformancev1.ConformancePayload{Data: def.GetResponseData()[sent]}}
		if sent == 0 {
			res.Payload.RequestInfo = info()
		}
		if err := s.delay.wait(ctx, def.GetResponseDelayMs()); err != nil {
			return status.FromContextError(err).Err()
		}
		if err := stream.Send(res); err != nil {
			return status.Errorf(codes.Internal, "error sending on stream: %s", err)
		}
	}
	if def.GetError() == nil {
		return nil
	}
	var extra []*anypb.Any
	if sent == 0 {
		infoAny, err := anypb.New(info())
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		extra = append(extra, infoAny)
	}
	return grpcError(def.GetError(), extra...)
}

// grpcUnaryOutcome is the payload or the status error a unary-style
// response definition asks for; an error carries the request info as its
// last detail.
func grpcUnaryOutcome(ctx context.Context, def *conformancev1.UnaryResponseDefinition, reqs []*anypb.Any) (*conformancev1.ConformancePayload, error) {
	info := requestInfo(ctx, incomingHeaders(ctx), nil, reqs)
	switch r := def.GetResponse().(type) {
	case *conformancev1.UnaryResponseDefinition_Error:
		infoAny, err := anypb.New(info)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, grpcError(r.Error, infoAny)
	case *conformancev1.UnaryResponseDefinition_ResponseData:
		return &conformancev1.ConformancePayload{RequestInfo: info, Data: r.ResponseData}, nil
	case nil:
		return &conformancev1.ConformancePayload{RequestInfo: info}, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "provided UnaryRequest.Response has an unexpected type %T", r)
	}
}

// grpcError is the status error a definition's Error describes, with extra
// details after its own.
func grpcError(e *conformancev1.Error, extra ...*anypb.Any) error {
	return status.ErrorProto(&statuspb.Status{
		Code:    int32(e.GetCode()),
		Message: e.GetMessage(),
		Details: errorDetails(e, extra...),
	})
}

func grpcAsAny(msg proto.Message) (*anypb.Any, error) {
	a, err := anypb.New(msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "unable to convert message: %s", err)
	}
	return a, nil
}

// incomingHeaders is the request metadata as the suite's headers; binary
// values are base64-encoded, as they travel.
func incomingHeaders(ctx context.Context) []*conformancev1.Header {
	md, _ := metadata.FromIncomingContext(ctx)
	hdrs := protoHeaders(md)
	for _, h := range hdrs {
		if strings.HasSuffix(h.Name, "-bin") {
			for i, v := range h.Value {
				h.Value[i] = connect.EncodeBinaryHeader([]byte(v))
			}
		}
	}
	return hdrs
}

// protoToMetadata converts the suite's headers to gRPC metadata; binary
// values arrive base64-encoded and grpc-go wants them raw.
func protoToMetadata(src []*conformancev1.Header) metadata.MD {
	md := make(metadata.MD, len(src))
	for _, h := range src {
		key := strings.ToLower(h.Name)
		vals := h.Value
		if strings.HasSuffix(key, "-bin") {
			vals = make([]string, len(h.Value))
			for i, v := range h.Value {
				if raw, err := connect.DecodeBinaryHeader(v); err == nil {
					vals[i] = string(raw)
				} else {
					vals[i] = v
				}
			}
		}
		md[key] = vals
	}
	return md
}
